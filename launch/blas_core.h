// Which kernels the fp32 GEMMs run on, said in words, and whether they are below what this processor runs. OpenBLAS
// built with DYNAMIC_ARCH picks one kernel set ("core") per process, from CPUID or from OPENBLAS_CORETYPE; an OpenBLAS
// older than the processor can pick one far below it (Debian's 0.3.21 runs Prescott's SSE3 kernels on Intel Emerald
// Rapids: sgemm about 5x slower), and some environments pin an older core on purpose (Haswell on AMD Zen 5, where
// 0.3.21's AVX-512 kernels compute wrong results). joule never changes the choice; it says which core runs, how its
// vector width compares with the processor's, and who chose it. No LibTorch.
#pragma once

#include <string>

#include "launch/cpu_isa.h"

namespace joule::launch {

// Vector levels: 1 SSE, 2 AVX, 3 AVX2 with FMA, 4 AVX-512; 0 unknown.
int blas_core_level(const std::string& openblas_core);  // OpenBLAS's core names ("Haswell", "SkylakeX", ...)
int cpu_vector_level(const CpuIsa& isa);

struct BlasCoreJudgement {
  int core_level = 0, cpu_level = 0;
  bool below = false;  // the core's vectors are narrower than what this processor runs
  std::string text;    // one line for logs: "OpenBLAS Haswell kernels (AVX2+FMA) on a CPU with AVX-512: ..."
};
// `core`: openblas_get_corename() ("" when the BLAS is not OpenBLAS); `coretype_env`: OPENBLAS_CORETYPE ("" unset).
BlasCoreJudgement judge_blas_core(const std::string& core, const CpuIsa& isa, const std::string& coretype_env);

}  // namespace joule::launch
