#include "models/residual_norm.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <vector>

#include "models/bf16_bits.h"
#include "models/cpu_vector.h"
#include "models/dropout.h"

namespace joule::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using bf16 = c10::BFloat16;

constexpr int64_t kRowGrain = 16;   // rows per parallel task in forward; each row is computed alone
constexpr int64_t kBlockRows = 32;  // rows per partial sum of the gamma/beta gradients (fixed: thread-independent)

// One row of n. v = dropout(a) + r into `v` (the dropped value rounded to bf16 as train_dropout's output is; `keep`
// null: no dropout), then y = (v - mean) * rstd * g + b in fp32 and bf16; `xhat` (or null) gets (v - mean) * rstd.
// Returns rstd.
JOULE_VECTOR_CLONES
float dropout_add_norm_row(const uint16_t* a, const uint8_t* keep, float scale, const float* r, const float* g,
                           const float* b, float eps, int64_t n, float* v, float* y, uint16_t* yb, float* xhat) {
  if (keep) {
    for (int64_t j = 0; j < n; ++j) {
      const uint32_t kept = 0u - static_cast<uint32_t>(keep[j] != 0);
      const uint16_t d = cpu::float_to_bf16(cpu::bf16_to_float(a[j]) * scale) & static_cast<uint16_t>(kept);
      v[j] = cpu::bf16_to_float(d) + r[j];
    }
  } else {
    for (int64_t j = 0; j < n; ++j) v[j] = cpu::bf16_to_float(a[j]) + r[j];
  }
  const float mean = cpu::lanes_sum(v, n) / static_cast<float>(n);
  for (int64_t j = 0; j < n; ++j) y[j] = (v[j] - mean) * (v[j] - mean);  // y as scratch for the squares
  const float rstd = 1.0f / std::sqrt(cpu::lanes_sum(y, n) / static_cast<float>(n) + eps);
  for (int64_t j = 0; j < n; ++j) {
    const float h = (v[j] - mean) * rstd;
    const float out = h * g[j] + b[j];
    y[j] = out;
    yb[j] = cpu::float_to_bf16(out);
  }
  if (xhat)
    for (int64_t j = 0; j < n; ++j) xhat[j] = (v[j] - mean) * rstd;
  return rstd;
}

// Backward of one row. dy (fp32) and dyb (bf16) are the gradients of y and of its bf16 copy (either may be null).
// Adds the row's terms to the gamma/beta partial sums; writes d(residual) in fp32 and d(a) in bf16, through the
// dropout mask as train_dropout's backward does (the add's gradient rounded to bf16, then scaled and rounded).
JOULE_VECTOR_CLONES
void dropout_add_norm_backward_row(const float* dy, const uint16_t* dyb, const float* xhat, float rstd, const float* g,
                                   const uint8_t* keep, float scale, int64_t n, float* dh, float* dh_xhat,
                                   float* dgamma, float* dbeta, float* dres, uint16_t* da) {
  for (int64_t j = 0; j < n; ++j) dh[j] = (dy ? dy[j] : 0.0f) + (dyb ? cpu::bf16_to_float(dyb[j]) : 0.0f);
  for (int64_t j = 0; j < n; ++j) {
    dgamma[j] += dh[j] * xhat[j];
    dbeta[j] += dh[j];
    dh[j] *= g[j];  // d(xhat)
    dh_xhat[j] = dh[j] * xhat[j];
  }
  const float inv_n = 1.0f / static_cast<float>(n);
  const float mean_dh = cpu::lanes_sum(dh, n) * inv_n, mean_dh_xhat = cpu::lanes_sum(dh_xhat, n) * inv_n;
  for (int64_t j = 0; j < n; ++j) dres[j] = rstd * (dh[j] - mean_dh - xhat[j] * mean_dh_xhat);
  if (keep) {
    for (int64_t j = 0; j < n; ++j) {
      const uint16_t kept = static_cast<uint16_t>(0u - static_cast<uint32_t>(keep[j] != 0));
      da[j] = cpu::float_to_bf16(cpu::bf16_to_float(cpu::float_to_bf16(dres[j])) * scale) & kept;
    }
  } else {
    for (int64_t j = 0; j < n; ++j) da[j] = cpu::float_to_bf16(dres[j]);
  }
}

struct Forward {
  torch::Tensor y, yb;
  torch::Tensor xhat, rstd, mask;  // kept for backward (undefined when not asked for; mask also without dropout)
  float scale = 1.0f;
};

Forward forward_rows(const torch::Tensor& a, const torch::Tensor& residual, const torch::Tensor& gamma,
                     const torch::Tensor& beta, double p, double eps, bool for_backward) {
  TORCH_CHECK(a.scalar_type() == torch::kBFloat16 && residual.scalar_type() == torch::kFloat &&
                  gamma.scalar_type() == torch::kFloat && beta.scalar_type() == torch::kFloat,
              "dropout_add_layer_norm_bf16: a bf16, residual, gamma and beta fp32");
  TORCH_CHECK(a.sizes() == residual.sizes(), "dropout_add_layer_norm_bf16: a and residual differ in shape");
  TORCH_CHECK(p >= 0.0 && p < 1.0, "dropout_add_layer_norm_bf16: p must be in [0, 1), got ", p);
  const int64_t n = a.size(-1), rows = a.numel() / n;
  TORCH_CHECK(gamma.numel() == n && beta.numel() == n, "dropout_add_layer_norm_bf16: gamma and beta must have ", n,
              " values");
  const torch::Tensor ac = a.contiguous(), rc = residual.contiguous(), g = gamma.contiguous(), b = beta.contiguous();
  Forward f;
  f.y = torch::empty(a.sizes(), rc.options());
  f.yb = torch::empty(a.sizes(), ac.options());
  std::optional<DropoutDraw> draw;
  if (p > 0.0) {
    draw.emplace(p, ac);
    f.scale = draw->scale();
    f.mask = torch::empty(a.sizes(), ac.options().dtype(torch::kUInt8));
  }
  if (for_backward) {
    f.xhat = torch::empty(a.sizes(), rc.options());
    f.rstd = torch::empty({rows}, rc.options());
  }
  const uint16_t* ap = cpu::bf16_bits(ac);
  const float *rp = rc.data_ptr<float>(), *gp = g.data_ptr<float>(), *bp = b.data_ptr<float>();
  float* yp = f.y.data_ptr<float>();
  uint16_t* ybp = cpu::bf16_bits(f.yb);
  uint8_t* mp = draw ? f.mask.data_ptr<uint8_t>() : nullptr;
  float* xp = for_backward ? f.xhat.data_ptr<float>() : nullptr;
  float* sp = for_backward ? f.rstd.data_ptr<float>() : nullptr;
  const float e = static_cast<float>(eps), scale = f.scale;
  at::parallel_for(0, rows, kRowGrain, [&](int64_t r0, int64_t r1) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t r = r0; r < r1; ++r) {
      uint8_t* keep = mp ? mp + r * n : nullptr;
      if (keep) draw->fill_mask(r * n, n, keep);
      const float rstd = dropout_add_norm_row(ap + r * n, keep, scale, rp + r * n, gp, bp, e, n, v.data(), yp + r * n,
                                              ybp + r * n, xp ? xp + r * n : nullptr);
      if (sp) sp[r] = rstd;
    }
  });
  return f;
}

struct DropoutAddLayerNorm : torch::autograd::Function<DropoutAddLayerNorm> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& a, const torch::Tensor& residual,
                               const torch::Tensor& gamma, const torch::Tensor& beta, double p, double eps) {
    RECORD_FUNCTION("joule::dropout_add_layer_norm", std::vector<c10::IValue>());
    Forward f = forward_rows(a, residual, gamma, beta, p, eps, /*for_backward=*/true);
    ctx->set_materialize_grads(false);
    ctx->save_for_backward({f.xhat, f.rstd, gamma.contiguous(), f.mask});
    ctx->saved_data["scale"] = static_cast<double>(f.scale);
    return {f.y, f.yb};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    RECORD_FUNCTION("joule::dropout_add_layer_norm_backward", std::vector<c10::IValue>());
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &xhat = saved[0], &rstd = saved[1], &gamma = saved[2], &mask = saved[3];
    const int64_t n = xhat.size(-1), rows = xhat.numel() / n, blocks = (rows + kBlockRows - 1) / kBlockRows;
    const torch::Tensor dy = grads[0].defined() ? grads[0].to(torch::kFloat).contiguous() : torch::Tensor();
    const torch::Tensor dyb = grads[1].defined() ? grads[1].to(torch::kBFloat16).contiguous() : torch::Tensor();
    torch::Tensor dres = torch::empty(xhat.sizes(), xhat.options());
    torch::Tensor da = torch::empty(xhat.sizes(), xhat.options().dtype(torch::kBFloat16));
    torch::Tensor partial = torch::zeros({blocks, 2, n}, xhat.options());  // per block: gamma's and beta's sums
    const float* dyp = dy.defined() ? dy.data_ptr<float>() : nullptr;
    const uint16_t* dybp = dyb.defined() ? cpu::bf16_bits(dyb) : nullptr;
    const float *xp = xhat.data_ptr<float>(), *sp = rstd.data_ptr<float>(), *gp = gamma.data_ptr<float>();
    const uint8_t* mp = mask.defined() ? mask.data_ptr<uint8_t>() : nullptr;
    float *dresp = dres.data_ptr<float>(), *pp = partial.data_ptr<float>();
    uint16_t* dap = cpu::bf16_bits(da);
    const float scale = static_cast<float>(ctx->saved_data["scale"].toDouble());
    at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
      std::vector<float> dh(static_cast<size_t>(n)), dh_xhat(static_cast<size_t>(n));
      for (int64_t blk = b0; blk < b1; ++blk) {
        float *dgamma = pp + blk * 2 * n, *dbeta = dgamma + n;
        for (int64_t r = blk * kBlockRows; r < std::min(rows, (blk + 1) * kBlockRows); ++r) {
          const int64_t o = r * n;
          dropout_add_norm_backward_row(dyp ? dyp + o : nullptr, dybp ? dybp + o : nullptr, xp + o, sp[r], gp,
                                        mp ? mp + o : nullptr, scale, n, dh.data(), dh_xhat.data(), dgamma, dbeta,
                                        dresp + o, dap + o);
        }
      }
    });
    // The blocks' sums in block order, column by column.
    torch::Tensor dgamma = torch::zeros({n}, xhat.options()), dbeta = torch::zeros({n}, xhat.options());
    float *dgp = dgamma.data_ptr<float>(), *dbp = dbeta.data_ptr<float>();
    at::parallel_for(0, n, 256, [&](int64_t j0, int64_t j1) {
      for (int64_t blk = 0; blk < blocks; ++blk)
        for (int64_t j = j0; j < j1; ++j) {
          dgp[j] += pp[blk * 2 * n + j];
          dbp[j] += pp[blk * 2 * n + n + j];
        }
    });
    return {da, dres, dgamma, dbeta, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

std::pair<torch::Tensor, torch::Tensor> dropout_add_layer_norm_bf16(const torch::Tensor& a,
                                                                    const torch::Tensor& residual,
                                                                    const torch::Tensor& gamma,
                                                                    const torch::Tensor& beta, double p, double eps) {
  const bool records = torch::GradMode::is_enabled() &&
                       (a.requires_grad() || residual.requires_grad() || gamma.requires_grad() || beta.requires_grad());
  if (records) {
    const variable_list out = DropoutAddLayerNorm::apply(a, residual, gamma, beta, p, eps);
    return {out[0], out[1]};
  }
  RECORD_FUNCTION("joule::dropout_add_layer_norm", std::vector<c10::IValue>());
  Forward f = forward_rows(a, residual, gamma, beta, p, eps, /*for_backward=*/false);
  return {f.y, f.yb};
}

}  // namespace joule::models
