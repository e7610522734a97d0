// fp32 GEMMs joule calls itself, on the run's fp32 GEMM path (the BLAS LibTorch calls, or oneDNN's sgemm:
// launch/blas_core.h Fp32Gemm): one row-major sgemm, the Linear layer of training, and the attention's batched
// products on the per-head views as they are.
//
// Why not LibTorch's: its fp32 linear on a [B, L, in] input is a GEMM into a zeroed output, then a pass adding the
// bias, and its backward writes each weight gradient into a new tensor that the parameter's accumulator then adds into
// .grad (a write, two reads and a write of every weight gradient a step); its matmul on the per-head views copies each
// operand whose heads are not contiguous, and its bmm selects every [b, h] matrix and calls addmm on it (three view
// ops and a dispatch per head): on bert-base's 96 heads of 128 x 64 the scores took 10.1 ms against 3.7 ms for the
// same sgemm calls made directly on the strided views (AMD Zen 3, OpenBLAS, one core: the same numbers to the bit).
#pragma once

#include <cstdint>

#include <torch/torch.h>

#include "launch/blas_core.h"
#include "models/bf16_linear.h"  // ZeroGradientScope

namespace joule::models {

// C [m, n] = alpha op(A) op(B) + beta C, row-major; op(A) [m, k] is A itself ('N', row stride lda) or the transpose
// of a [k, m] A ('T'); likewise B. On oneDNN's sgemm (kOnednn: a joule::Error where joule was built without it) or
// the BLAS's sgemm_ (kBlas: a joule::InternalError where no BLAS exports one: fp32_blas_sgemm_available()).
void sgemm_row_major(launch::Fp32Gemm gemm, char trans_a, char trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                     const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc);
// Whether the process has a BLAS sgemm_ to call (not where LibTorch keeps its BLAS's symbols to itself, as PyPI's
// MKL builds do).
bool fp32_blas_sgemm_available();
// Whether joule calls sgemm_row_major on `gemm`'s path: always on oneDNN's (where this joule was built without it,
// the call says so), on the BLAS's where it exports sgemm_.
bool sgemm_on(launch::Fp32Gemm gemm);

// Whether fp32_linear takes these: fp32 CPU x, weight and bias (or none), and an sgemm on `gemm`'s path.
bool fp32_linear_applies(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                         launch::Fp32Gemm gemm);

// x W^T + b: x [..., in], W [out, in], b [out] or undefined, fp32 on the CPU; differentiable in all three. Forward is
// one GEMM into the bias (copied into the output first); backward's dx = dy W and dW = dy^T x, the latter added by the
// GEMM straight into the weight's .grad when it has one (the gradient buckets' views; stored, not added, where
// ZeroGradientScope says it holds zeros), so the parameter's accumulator gets no tensor to add and still runs its
// post hooks (the gradient reducer marks the parameter ready there). The bias gradient is dy summed over rows.
torch::Tensor fp32_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                          launch::Fp32Gemm gemm);

enum class HeadsOut {
  kHeadsFirst,  // out [B, H, m, n], contiguous
  kHeadsLast,   // out [B, m, H, n], contiguous: the attention's context, [B, L, hidden] without a copy
};

// Whether fp32_batched_matmul takes these: 4-D fp32 CPU tensors of matching sizes, and an sgemm on `gemm`'s path.
bool fp32_batched_matmul_applies(const torch::Tensor& a, const torch::Tensor& b, launch::Fp32Gemm gemm);
// The same but for the element type: whether these would apply once widened to fp32.
bool batched_matmul_shapes_apply(const torch::Tensor& a, const torch::Tensor& b, launch::Fp32Gemm gemm);

// a [B, H, m, k] times b [B, H, k, n], one sgemm per [b, h] on each matrix where it lies (row- or column-major within
// any strides: the per-head views of [B, L, hidden] need no copy; a matrix with neither is copied first), laid out
// as `out` says. Differentiable in a and b: backward's two products likewise, each gradient in its input's layout.
torch::Tensor fp32_batched_matmul(const torch::Tensor& a, const torch::Tensor& b, launch::Fp32Gemm gemm,
                                  HeadsOut out = HeadsOut::kHeadsFirst);

}  // namespace joule::models
