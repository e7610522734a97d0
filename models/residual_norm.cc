#include "models/residual_norm.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <cmath>
#include <vector>

#include "models/cpu_vector.h"

namespace joule::models {
namespace {

constexpr int64_t kRowGrain = 16;  // rows per parallel task; each row is computed alone

// One row of n: v = a + r into `buf`, then y = (v - mean) / sqrt(var + eps) * g + b in fp32 and bf16.
JOULE_VECTOR_CLONES
void add_norm_row(const uint16_t* a, const float* r, const float* g, const float* b, float eps, int64_t n, float* buf,
                  float* y, uint16_t* yb) {
  for (int64_t j = 0; j < n; ++j) buf[j] = cpu::bf16_to_float(a[j]) + r[j];
  const float mean = cpu::lanes_sum(buf, n) / static_cast<float>(n);
  for (int64_t j = 0; j < n; ++j) y[j] = (buf[j] - mean) * (buf[j] - mean);  // y as scratch for the squares
  const float rstd = 1.0f / std::sqrt(cpu::lanes_sum(y, n) / static_cast<float>(n) + eps);
  for (int64_t j = 0; j < n; ++j) {
    const float v = (buf[j] - mean) * rstd * g[j] + b[j];
    y[j] = v;
    yb[j] = cpu::float_to_bf16(v);
  }
}

}  // namespace

std::pair<torch::Tensor, torch::Tensor> add_layer_norm_bf16(const torch::Tensor& a, const torch::Tensor& residual,
                                                            const torch::Tensor& gamma, const torch::Tensor& beta,
                                                            double eps) {
  RECORD_FUNCTION("joule::add_layer_norm", std::vector<c10::IValue>());
  TORCH_CHECK(a.scalar_type() == torch::kBFloat16 && residual.scalar_type() == torch::kFloat &&
                  gamma.scalar_type() == torch::kFloat && beta.scalar_type() == torch::kFloat,
              "add_layer_norm_bf16: a bf16, residual, gamma and beta fp32");
  TORCH_CHECK(a.sizes() == residual.sizes(), "add_layer_norm_bf16: a and residual differ in shape");
  const int64_t n = a.size(-1), rows = a.numel() / n;
  TORCH_CHECK(gamma.numel() == n && beta.numel() == n, "add_layer_norm_bf16: gamma and beta must have ", n, " values");
  const torch::Tensor ac = a.contiguous(), rc = residual.contiguous(), g = gamma.contiguous(), b = beta.contiguous();
  torch::Tensor y = torch::empty(a.sizes(), rc.options()), yb = torch::empty(a.sizes(), ac.options());
  const auto* ap = reinterpret_cast<const uint16_t*>(ac.data_ptr<c10::BFloat16>());
  const float *rp = rc.data_ptr<float>(), *gp = g.data_ptr<float>(), *bp = b.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  auto* ybp = reinterpret_cast<uint16_t*>(yb.data_ptr<c10::BFloat16>());
  const float e = static_cast<float>(eps);
  at::parallel_for(0, rows, kRowGrain, [&](int64_t r0, int64_t r1) {
    std::vector<float> buf(static_cast<size_t>(n));
    for (int64_t r = r0; r < r1; ++r)
      add_norm_row(ap + r * n, rp + r * n, gp, bp, e, n, buf.data(), yp + r * n, ybp + r * n);
  });
  return {y, yb};
}

}  // namespace joule::models
