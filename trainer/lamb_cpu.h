// LAMB's update as fused loops over float32 arrays, for parameters on the CPU. The tensor-op formulation
// (optimizer.cc, used on other devices) reads and writes every parameter-sized array about 30 times per step and
// allocates two parameter-sized temporaries; these loops read the gradient, moments and weights twice in all and
// allocate nothing. The optimizer cuts every parameter into fixed chunks and runs chunks in parallel, so partial
// sums, and so the results, do not depend on the thread count. No LibTorch here: this file is built with
// -O3 -fno-math-errno so that the square roots vectorize, and once per instruction set (JOULE_VECTOR_CLONES): the
// AVX-512 copy runs the moments and the update at memory speed, where SSE2's is bound by the divisions and square
// roots (97 and 81 ms over 110M parameters on one Zen 5 core, against 58 and 40).
#pragma once

#include <cstdint>

namespace joule::trainer::lamb_cpu {

struct Hyperparameters {
  float beta1, beta2;
  float one_minus_beta1, one_minus_beta2;  // from the betas in double: 1 - 0.999f loses 5 digits
  float c1, c2;                            // bias corrections 1 - beta^t
  float eps;
  float weight_decay;  // 0 for biases and LayerNorm parameters
  float grad_scale;    // global-norm clipping, applied as the gradient is read
};

// The sum of x[i]² in double.
double sum_squares(const float* x, int64_t n);

struct Norms {
  double update_sq = 0, param_sq = 0;
  Norms& operator+=(const Norms& o) {
    update_sq += o.update_sq;
    param_sq += o.param_sq;
    return *this;
  }
};
// m = beta1 m + (1 - beta1) g', v = beta2 v + (1 - beta2) g'² with g' = grad_scale g; returns the sums of squares
// of the update direction u = (m / c1) / (sqrt(v / c2) + eps) + weight_decay p and of p.
Norms moments_and_norms(const float* g, float* m, float* v, const float* p, int64_t n, const Hyperparameters& h);
// p -= step u, with u recomputed from the moments moments_and_norms wrote (the same expression, the same values).
void apply(float* p, const float* m, const float* v, int64_t n, const Hyperparameters& h, float step);
// Both in one pass, for parameters whose step does not depend on norms (no trust ratio).
void moments_and_apply(const float* g, float* m, float* v, float* p, int64_t n, const Hyperparameters& h, float step);

}  // namespace joule::trainer::lamb_cpu
