#include "models/attention_softmax.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace joule::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using bf16 = c10::BFloat16;

// Rows per parallel task: results do not depend on how rows are split, each row is computed alone.
constexpr int64_t kRowGrain = 64;

// p = softmax(scale * s + m) for one row of n, in fp32 on `buf`.
void softmax_row(const bf16* s, const float* m, float scale, int64_t n, float* buf, bf16* p) {
  float top = -std::numeric_limits<float>::infinity();
  for (int64_t j = 0; j < n; ++j) {
    buf[j] = static_cast<float>(s[j]) * scale + m[j];
    top = std::max(top, buf[j]);
  }
  float sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    buf[j] = std::exp(buf[j] - top);
    sum += buf[j];
  }
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j < n; ++j) p[j] = static_cast<bf16>(buf[j] * inv);
}

// ds = scale * p * (g - <g, p>) for one row of n.
void softmax_backward_row(const bf16* g, const bf16* p, float scale, int64_t n, bf16* ds) {
  float dot = 0;
  for (int64_t j = 0; j < n; ++j) dot += static_cast<float>(g[j]) * static_cast<float>(p[j]);
  for (int64_t j = 0; j < n; ++j)
    ds[j] = static_cast<bf16>(scale * static_cast<float>(p[j]) * (static_cast<float>(g[j]) - dot));
}

struct CpuScaledMaskedSoftmax : torch::autograd::Function<CpuScaledMaskedSoftmax> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& scores, const torch::Tensor& mask_bias, double scale) {
    RECORD_FUNCTION("joule::attention_softmax", std::vector<c10::IValue>());
    const torch::Tensor s = scores.contiguous();
    const int64_t n = s.size(-1), rows = s.numel() / n, rows_per_batch = rows / s.size(0);
    const torch::Tensor m = mask_bias.to(torch::kFloat).contiguous().view({s.size(0), n});
    torch::Tensor p = torch::empty_like(s, torch::MemoryFormat::Contiguous);
    const bf16* sp = s.data_ptr<bf16>();
    const float* mp = m.data_ptr<float>();
    bf16* pp = p.data_ptr<bf16>();
    const float sc = static_cast<float>(scale);
    at::parallel_for(0, rows, kRowGrain, [&](int64_t r0, int64_t r1) {
      std::vector<float> buf(n);
      for (int64_t r = r0; r < r1; ++r) softmax_row(sp + r * n, mp + (r / rows_per_batch) * n, sc, n, buf.data(), pp + r * n);
    });
    ctx->save_for_backward({p});
    ctx->saved_data["scale"] = scale;
    return p;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    RECORD_FUNCTION("joule::attention_softmax_backward", std::vector<c10::IValue>());
    const torch::Tensor p = ctx->get_saved_variables()[0];
    const torch::Tensor g = grads[0].to(torch::kBFloat16).contiguous();
    const int64_t n = p.size(-1), rows = p.numel() / n;
    torch::Tensor ds = torch::empty_like(p, torch::MemoryFormat::Contiguous);
    const bf16 *gp = g.data_ptr<bf16>(), *pp = p.data_ptr<bf16>();
    bf16* dp = ds.data_ptr<bf16>();
    const float sc = static_cast<float>(ctx->saved_data["scale"].toDouble());
    at::parallel_for(0, rows, kRowGrain, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) softmax_backward_row(gp + r * n, pp + r * n, sc, n, dp + r * n);
    });
    return {ds, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor scaled_masked_softmax(const torch::Tensor& scores, const torch::Tensor& mask_bias, double scale) {
  if (scores.device().is_cpu() && scores.scalar_type() == torch::kBFloat16 && scores.dim() == 4)
    return CpuScaledMaskedSoftmax::apply(scores, mask_bias, scale);
  return torch::softmax(scores.to(torch::kFloat).mul(scale).add(mask_bias), -1).to(scores.scalar_type());
}

}  // namespace joule::models
