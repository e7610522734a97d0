// The vector and matrix instructions this processor and its operating system support, read once with CPUID and
// XGETBV (x86-64; every flag false elsewhere). Mixed precision asks it whether bf16 matmuls run natively
// (AVX512-BF16 or AMX-BF16) or would be emulated; the cpu-host instance profile derives its peak FLOP/s from it.
//
// JOULE_CPU_ISA=LIST replaces the detected set (a comma-separated subset of the names below, or "none"), so tests and
// users can see what joule does on a processor without an extension.
#pragma once

#include <string>
#include <vector>

namespace joule::launch {

struct CpuIsa {
  bool avx2 = false, fma = false;  // 256-bit vectors with fused multiply-add
  bool avx512f = false;            // 512-bit vectors (with the OS saving their state)
  bool avx512_bf16 = false;        // VDPBF16PS: bf16 pair dot products into fp32
  bool amx_bf16 = false;           // AMX tiles with TDPBF16PS (with the OS having granted tile state)
  bool avx512_halves = false;      // 512-bit FMAs issued as two 256-bit halves (AMD Zen 4): half their peak rate

  bool native_bf16() const { return avx512_bf16 || amx_bf16; }
  std::string describe() const;  // "avx2 fma avx512f avx512_bf16", or "none"

  static CpuIsa detect();                        // the hardware's, ignoring JOULE_CPU_ISA
  static CpuIsa parse(const std::string& list);  // "avx2,fma" (a joule::Error naming an unknown word)
  static const CpuIsa& current();                // JOULE_CPU_ISA when set, else detect(); read once per process
};

// Peak FLOP per cycle of one core for the ISA: fp32 from the FMA width, bf16 from AVX512-BF16 or AMX-BF16 (fp32's
// figure without them: bf16 is then converted and computed in fp32); 0 for another dtype. Sources in cpu_isa.cc.
double cpu_flops_per_cycle(const CpuIsa& isa, const std::string& dtype);

// This core's clock in GHz, measured: a chain of dependent 64-bit multiplies (three cycles each on every x86-64 core)
// timed in the thread's own CPU time, so other processes sharing the core do not slow it; the best of five ~12 ms
// tries.
// Turbo included: a scalar loop runs at the clock vector code can at most reach, so a peak from it is never
// understated. 0 where it cannot be measured (not x86-64). Measured once per process.
double core_clock_ghz();

std::vector<int> affinity_cpus();  // the ids of the online CPUs this process may run on (sched_getaffinity)
int physical_cores();  // their count: SMT siblings count apart (cores_behind_affinity counts cores); 1 if unknown

// The cores behind CPUs: their distinct sibling sets (sysfs's topology/thread_siblings_list: the CPUs sharing one
// core), so SMT siblings, which share one core's FMA units, count once (what a peak FLOP/s multiplies); 0 where sysfs
// does not say for one of them. `sysfs_cpu` is /sys/devices/system/cpu but in tests. (Not (package, core_id) pairs:
// core ids repeat across dies and clusters on some kernels.)
int cores_behind(const std::vector<int>& cpus, const std::string& sysfs_cpu = "/sys/devices/system/cpu");
int cores_behind_affinity();  // of the CPUs this process may run on; their count where sysfs does not say
// Of every online CPU (sysfs_cpu/online; sched affinity ignored); 0 where sysfs does not say.
int cores_online(const std::string& sysfs_cpu = "/sys/devices/system/cpu");
// A kernel CPU list ("0-3,8,10-11", as sysfs's online and thread_siblings_list files write them): its ids; empty
// where it is not one (or names a CPU id above 2^20).
std::vector<int> parse_cpu_list(const std::string& list);

// This thread's CPU time in seconds (CLOCK_THREAD_CPUTIME_ID): what a one-thread measurement counts, other processes
// on the core left out.
double thread_cpu_seconds();

}  // namespace joule::launch
