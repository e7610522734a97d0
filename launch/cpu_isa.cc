#include "launch/cpu_isa.h"

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "launch/util/error.h"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace joule::launch {
namespace {

#if defined(__x86_64__)
struct Regs {
  uint32_t eax = 0, ebx = 0, ecx = 0, edx = 0;
};

Regs cpuid(uint32_t leaf, uint32_t subleaf) {
  Regs r;
  if (!__get_cpuid_count(leaf, subleaf, &r.eax, &r.ebx, &r.ecx, &r.edx)) return {};
  return r;
}

uint64_t xgetbv0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t{hi} << 32) | lo;
}

bool bit(uint32_t word, int n) { return (word >> n) & 1u; }
#endif

}  // namespace

// Bit positions: Intel 64 and IA-32 Architectures Software Developer's Manual, Vol. 2A, CPUID (leaf 1; leaf 7
// sub-leaves 0 and 1) and Vol. 1, 13.3 (the XCR0 state components the OS must enable).
CpuIsa CpuIsa::detect() {
  CpuIsa isa;
#if defined(__x86_64__)
  const Regs l1 = cpuid(1, 0);
  if (!bit(l1.ecx, 27)) return isa;  // no OSXSAVE: the OS saves no vector state beyond SSE
  const uint64_t xcr0 = xgetbv0();
  const bool ymm = (xcr0 & 0x6) == 0x6, zmm = (xcr0 & 0xe6) == 0xe6, tiles = (xcr0 & 0x60000) == 0x60000;
  const Regs l7 = cpuid(7, 0), l7s1 = cpuid(7, 1);
  isa.fma = ymm && bit(l1.ecx, 12);
  isa.avx2 = ymm && bit(l7.ebx, 5);
  isa.avx512f = zmm && bit(l7.ebx, 16);
  isa.avx512_bf16 = isa.avx512f && bit(l7s1.eax, 5);
  isa.amx_bf16 = tiles && bit(l7.edx, 22) && bit(l7.edx, 24);
  // AMD family 19h with AVX-512 is Zen 4 (Zen 3, the same family, has none), whose 512-bit operations run on 256-bit
  // pipes in two halves: Software Optimization Guide for the AMD Zen4 Microarchitecture, publication 57647.
  const Regs l0 = cpuid(0, 0);
  const bool amd = l0.ebx == 0x68747541 && l0.edx == 0x69746e65 && l0.ecx == 0x444d4163;  // "AuthenticAMD"
  const uint32_t family = ((l1.eax >> 8) & 0xf) + (((l1.eax >> 8) & 0xf) == 0xf ? (l1.eax >> 20) & 0xff : 0);
  isa.avx512_halves = isa.avx512f && amd && family == 0x19;
#endif
  return isa;
}

CpuIsa CpuIsa::parse(const std::string& list) {
  CpuIsa isa;
  if (list == "none") return isa;
  std::stringstream in(list);
  std::string word;
  while (std::getline(in, word, ',')) {
    if (word == "avx2")
      isa.avx2 = true;
    else if (word == "fma")
      isa.fma = true;
    else if (word == "avx512f")
      isa.avx512f = true;
    else if (word == "avx512_bf16")
      isa.avx512_bf16 = true;
    else if (word == "amx_bf16")
      isa.amx_bf16 = true;
    else if (word == "avx512_halves")
      isa.avx512_halves = true;
    else
      throw Error("JOULE_CPU_ISA: unknown instruction set '" + word + "'",
                  "use a comma-separated list of avx2, fma, avx512f, avx512_bf16, amx_bf16, avx512_halves, or none",
                  ErrorKind::usage);
  }
  return isa;
}

const CpuIsa& CpuIsa::current() {
  static const CpuIsa isa = [] {
    const char* forced = std::getenv("JOULE_CPU_ISA");
    return forced && *forced ? parse(forced) : detect();
  }();
  return isa;
}

std::string CpuIsa::describe() const {
  std::string out;
  auto add = [&](bool on, const char* name) {
    if (on) out += (out.empty() ? "" : " ") + std::string(name);
  };
  add(avx2, "avx2");
  add(fma, "fma");
  add(avx512f, "avx512f");
  add(avx512_bf16, "avx512_bf16");
  add(amx_bf16, "amx_bf16");
  add(avx512_halves, "avx512_halves");
  return out.empty() ? "none" : out;
}

double cpu_flops_per_cycle(const CpuIsa& isa, const std::string& dtype) {
  // fp32: two FMA pipes per core, each a multiply and an add per lane per cycle, 16 lanes (512-bit) or 8 (256-bit).
  // Two 512-bit FMA pipes: Intel 64 and IA-32 Architectures Optimization Reference Manual (Skylake Server and later
  // server cores;
  // https://www.intel.com/content/www/us/en/developer/articles/technical/intel64-and-ia32-architectures-optimization.html);
  // AMD, Software Optimization Guide for the AMD Zen5 Microarchitecture, publication 58455 rev. 1.00, August 2024
  // (four FP pipes, two with FMA, a full 512-bit datapath on EPYC 9005), and A. J. Yee, "Zen5's AVX512 Teardown"
  // (http://numberworld.org/blogs/2024_8_7_zen5_avx512_teardown).
  // Zen 4 issues each 512-bit FMA as two 256-bit halves: AVX2's rate (avx512_halves).
  const double fp32 = isa.avx512f && !isa.avx512_halves ? 2 * 16 * 2 : (isa.avx2 && isa.fma) ? 2 * 8 * 2 : 2 * 4;
  if (dtype == "fp32") return fp32;
  if (dtype != "bf16") return 0;
  // AMX-BF16: 1024 bf16 FLOP per cycle per core (Intel, "Accelerate AI Workloads with Intel AMX", 4th Gen Xeon
  // Scalable processors: 2048 INT8 or 1024 BF16 operations per cycle per core).
  if (isa.amx_bf16) return 1024;
  // AVX512-BF16: VDPBF16PS multiplies 32 bf16 pairs and adds them into 16 fp32 lanes (Intel 64 and IA-32
  // Architectures Software Developer's Manual, Vol. 2A;
  // https://www.intel.com/content/www/us/en/developer/articles/technical/intel-sdm.html), 64 FLOP per instruction on
  // each of the two FMA pipes.
  if (isa.avx512_bf16) return isa.avx512_halves ? 64 : 2 * 64;
  return fp32;
}

int cores_behind(const std::vector<int>& cpus, const std::string& sysfs_cpu) {
  std::set<std::vector<int>> cores;
  for (const int cpu : cpus) {
    std::ifstream f(sysfs_cpu + "/cpu" + std::to_string(cpu) + "/topology/thread_siblings_list");
    std::string list;
    if (!(f >> list)) return 0;
    std::vector<int> siblings = parse_cpu_list(list);
    if (siblings.empty()) return 0;
    cores.insert(std::move(siblings));
  }
  return static_cast<int>(cores.size());
}

std::vector<int> affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> ids;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return ids;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) ids.push_back(c);
  return ids;
}

int physical_cores() { return std::max(1, static_cast<int>(affinity_cpus().size())); }

int cores_behind_affinity() {
  const int cores = cores_behind(affinity_cpus());
  return cores > 0 ? cores : physical_cores();
}

std::vector<int> parse_cpu_list(const std::string& list) {
  std::vector<int> cpus;
  std::stringstream ranges(list);
  for (std::string range; std::getline(ranges, range, ',');) {
    const size_t dash = range.find('-');
    size_t used_lo = 0, used_hi = 0;
    try {
      const std::string lo_text = range.substr(0, dash),
                        hi_text = dash == std::string::npos ? lo_text : range.substr(dash + 1);
      const int lo = std::stoi(lo_text, &used_lo), hi = std::stoi(hi_text, &used_hi);
      if (used_lo != lo_text.size() || used_hi != hi_text.size() || lo < 0 || hi < lo || hi > (1 << 20)) return {};
      for (int c = lo; c <= hi; ++c) cpus.push_back(c);
    } catch (const std::exception&) {
      return {};
    }
  }
  return cpus;
}

int cores_online(const std::string& sysfs_cpu) {
  std::ifstream f(sysfs_cpu + "/online");
  std::string list;
  if (!(f >> list)) return 0;
  const std::vector<int> cpus = parse_cpu_list(list);
  return cpus.empty() ? 0 : cores_behind(cpus, sysfs_cpu);
}

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

namespace {

double measure_clock_ghz() {
#if defined(__x86_64__)
  constexpr uint64_t kMultiplies = 16'000'000;  // 48M cycles: ~12 ms at 4 GHz
  double best = 0;
  for (int attempt = 0; attempt < 5; ++attempt) {
    uint64_t x = 3, n = kMultiplies;
    const double t0 = thread_cpu_seconds();
    // Eight multiplies into one register per iteration: a dependency chain of 3 cycles per 64-bit IMUL on every
    // x86-64 core since Nehalem and Zen (Intel's optimization manual, AMD's software optimization guides; Agner Fog's
    // instruction tables), which no core folds away as some fold small immediate adds. The counter's sub and the
    // branch run beside it.
    __asm__ volatile(
        "1:\n\t"
        "imul %0, %0\n\timul %0, %0\n\timul %0, %0\n\timul %0, %0\n\t"
        "imul %0, %0\n\timul %0, %0\n\timul %0, %0\n\timul %0, %0\n\t"
        "sub $8, %1\n\tjnz 1b\n"
        : "+r"(x), "+r"(n));
    const double seconds = thread_cpu_seconds() - t0;
    if (seconds > 0) best = std::max(best, 3.0 * static_cast<double>(kMultiplies) / seconds / 1e9);
  }
  return best;
#else
  return 0;
#endif
}

}  // namespace

double core_clock_ghz() {
  static const double ghz = measure_clock_ghz();
  return ghz;
}

}  // namespace joule::launch
