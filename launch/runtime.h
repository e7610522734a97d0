// How this process runs: intra-op threads for LibTorch and OpenBLAS, the BLAS actually in use,
// allocator tuning, and the versions of the libraries joule is linked against. No LibTorch here.
#pragma once

#include <string>
#include <vector>

#include "launch/blas_core.h"
#include "launch/util/clock.h"  // seconds_since, which the users of this header time with

namespace joule::launch {

struct BlasInfo {
  std::string library;        // the shared object that provides sgemm_ (dladdr), or "unknown"
  std::string description;    // e.g. "OpenBLAS 0.3.21 DYNAMIC_ARCH NO_AFFINITY Haswell MAX_THREADS=64"
  bool is_reference = false;  // netlib reference BLAS: matmuls ~20x slower than OpenBLAS
  int threads = 0;            // OpenBLAS's thread count, 0 when not OpenBLAS
  std::string core;           // OpenBLAS's kernel set (openblas_get_corename: "Haswell"), "" when not OpenBLAS
};
BlasInfo detect_blas();

// The kernels the fp32 matmuls run on, judged against this processor and naming who chose them (launch/blas_core.h):
// "OpenBLAS Haswell kernels (AVX2+FMA) on a CPU with AVX-512: below what it runs, ..." when `blas` is OpenBLAS, else
// its description.
std::string fp32_gemm_kernels(const BlasInfo& blas);
// `blas`'s OpenBLAS kernels judged against this processor and OPENBLAS_CORETYPE (launch/blas_core.h); empty when
// `blas` is not OpenBLAS.
BlasCoreJudgement judge_detected_blas(const BlasInfo& blas);

// The GEMM paths of a CPU process, measured and chosen at start-up: the calibration GEMM's rate on one core in
// LibTorch's fp32 matmul (its BLAS), oneDNN's sgemm (its product compared with LibTorch's) and LibTorch's bf16 matmul
// (oneDNN), the clock the peaks are computed from, and the fp32 path train.fp32_gemm resolves to (launch/blas_core.h).
struct GemmPath {
  GemmChoice choice;
  GemmRates rates;
  BlasCoreJudgement blas;
  std::string blas_description;
  double clock_ghz = 0;
  std::string line() const;  // "fp32 oneDNN avx512_core_bf16 205 GFLOP/s/core (84 % of peak), not ..."
};
// Measures on one thread (about 0.1 s; the process's thread counts restored after, also on an error) and chooses;
// throws as choose_fp32_gemm does.
GemmPath choose_gemm_path(Fp32GemmSetting setting);
// Whether this joule can run fp32 GEMMs on oneDNN (built with it).
bool onednn_available();

// Sets LibTorch's intra-op threads and OpenBLAS's threads (which torch::set_num_threads does not set).
void set_threads(int threads);

std::string torch_version();
// physical_cores() and affinity_cpus(): launch/cpu_isa.h (the CPUs this process may run on, and their cores).

}  // namespace joule::launch
