// Which kernels the fp32 GEMMs run on, said in words, and whether they are below what this processor runs. OpenBLAS
// built with DYNAMIC_ARCH picks one kernel set ("core") per process, from CPUID or from OPENBLAS_CORETYPE; an OpenBLAS
// older than the processor can pick one far below it (Debian's 0.3.21 runs Prescott's SSE3 kernels on Intel Emerald
// Rapids: sgemm about 5x slower), and some environments pin an older core on purpose (Haswell on AMD Zen 5, where
// 0.3.21's AVX-512 kernels compute wrong results). joule never changes the choice; it says which core runs, how its
// vector width compares with the processor's, and who chose it. No LibTorch.
#pragma once

#include <string>
#include <vector>

#include "launch/cpu_isa.h"

namespace joule::launch {

// Vector levels: 1 SSE, 2 AVX, 3 AVX2 with FMA, 4 AVX-512; 0 unknown.
int blas_core_level(const std::string& openblas_core);  // OpenBLAS's core names ("Haswell", "SkylakeX", ...)
int cpu_vector_level(const CpuIsa& isa);

struct BlasCoreJudgement {
  std::string core;  // OpenBLAS's core name; "" when the BLAS is not OpenBLAS
  int core_level = 0, cpu_level = 0;
  bool below = false;  // the core's vectors are narrower than what this processor runs
  std::string text;    // one line for logs: "OpenBLAS Haswell kernels (AVX2+FMA) on a CPU with AVX-512: ..."
  std::string who;     // who chose the core: "OPENBLAS_CORETYPE=Haswell, set by the environment", or CPUID
};
// `core`: openblas_get_corename() ("" when the BLAS is not OpenBLAS); `coretype_env`: OPENBLAS_CORETYPE ("" unset).
BlasCoreJudgement judge_blas_core(const std::string& core, const CpuIsa& isa, const std::string& coretype_env);

// Which library the fp32 GEMMs of a CPU run take: the BLAS LibTorch calls (OpenBLAS, with the core above), or oneDNN's
// sgemm (the library LibTorch runs its bf16 matmuls on, whose kernels follow the processor's ISA at run time).
enum class Fp32Gemm { kBlas, kOnednn };
const char* fp32_gemm_name(Fp32Gemm g);  // "blas", "onednn"

// One calibration GEMM timed on one core in each path (launch/runtime.h measure_gemm_rates), with oneDNN's fp32
// product compared against the BLAS's on the same operands.
struct GemmRates {
  double blas_fp32 = 0, onednn_fp32 = 0, onednn_bf16 = 0;  // GFLOP/s on one core; 0: not measured or not available
  double onednn_fp32_difference = -1;                      // max |oneDNN - BLAS| / max |BLAS|; < 0: not compared
  std::string onednn_isa;  // the ISA oneDNN dispatches to ("avx512_core_bf16"); "" without oneDNN
};
// oneDNN's fp32 product agrees with the BLAS's when they differ by at most this share of the product's largest value
// (summation order alone gives ~1e-6 at K = 1024; a wrong kernel gives O(1)).
inline constexpr double kGemmAgreement = 1e-4;
// This joule has oneDNN and its fp32 products agree with the BLAS's on this processor: it may run fp32 GEMMs.
inline bool onednn_fp32_usable(const GemmRates& r) {
  return r.onednn_fp32 > 0 && r.onednn_fp32_difference >= 0 && r.onednn_fp32_difference <= kGemmAgreement;
}
// auto takes oneDNN only where it is at least this much faster than the BLAS.
inline constexpr double kOnednnSpeedup = 1.2;

// train.fp32_gemm and --fp32-gemm: the library fp32 GEMMs run on, as set or chosen at start-up.
enum class Fp32GemmSetting { automatic, blas, onednn };
inline const std::vector<std::string> kFp32GemmWords = {"auto", "blas", "onednn"};  // Fp32GemmSetting's order

struct GemmChoice {
  Fp32Gemm fp32 = Fp32Gemm::kBlas;
  std::string reason;  // one clause: why this path ("OpenBLAS Haswell kernels ... below ...; oneDNN 2.0x faster ...")
};
// `setting` is train.fp32_gemm. auto takes oneDNN where the BLAS's kernels are below the
// processor (`blas.below`), oneDNN's product agrees with the BLAS's and it runs at least kOnednnSpeedup faster; else
// the BLAS. onednn as set still needs the agreement (a joule::Error naming the key otherwise, or when oneDNN is not
// available). Decided from its arguments alone, so a test covers every processor.
GemmChoice choose_fp32_gemm(Fp32GemmSetting setting, const BlasCoreJudgement& blas, const GemmRates& rates);

// The start-up line: "fp32 oneDNN avx512_core_bf16 205 GFLOP/s/core (84 % of peak), not OpenBLAS Haswell kernels at
// 101 (41 %): <reason>; bf16 oneDNN avx512_core_bf16 451 GFLOP/s/core (91 %); peaks at the measured 3.87 GHz".
// `clock_ghz` 0: no shares of peak.
std::string gemm_line(const GemmChoice& choice, const GemmRates& rates, const BlasCoreJudgement& blas,
                      const std::string& blas_description, const CpuIsa& isa, double clock_ghz);

}  // namespace joule::launch
