#include "launch/cpu_isa.h"

#include <cstdint>
#include <cstdlib>
#include <sstream>

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
    else
      throw Error("JOULE_CPU_ISA: unknown instruction set '" + word + "'",
                  "use a comma-separated list of avx2, fma, avx512f, avx512_bf16, amx_bf16, or none", ErrorKind::usage);
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
  return out.empty() ? "none" : out;
}

}  // namespace joule::launch
