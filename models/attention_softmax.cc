#include "models/attention_softmax.h"
#include "models/bf16_bits.h"
#include "models/cpu_vector.h"
#include "models/dropout.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <vector>

namespace joule::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
using bf16 = c10::BFloat16;

// Rows per parallel task: results do not depend on how rows are split, each row is computed alone.
constexpr int64_t kRowGrain = 64;

// p = softmax(scale * s + m) for one row of n (bf16 bit patterns in and out), in fp32 on `buf`: 16 elements at a time
// as 16 / W vectors of W lanes, the elements past the last full 16 one by one; the max and the sum in 16 fixed lanes,
// then the lanes in order, then those elements (as cpu::lanes_sum adds), so a row gives the same bits on every run and
// at either width.
template <int W>
JOULE_LANES_INLINE void softmax_row_lanes(const uint16_t* s, const float* m, float scale, int64_t n, float* buf,
                                          uint16_t* p) {
  using V = typename cpu::Lanes<W>::F;
  constexpr int64_t L = cpu::kLanes, kParts = L / W;
  static_assert(L % W == 0, "the 16 summation lanes are whole vectors");
  const int64_t full = n - n % L;
  V top_lanes[kParts], sum_lanes[kParts];
  for (int64_t h = 0; h < kParts; ++h) top_lanes[h] = cpu::splat<W>(-std::numeric_limits<float>::infinity());
  for (int64_t j = 0; j < full; j += L)
    for (int64_t h = 0, k = j; h < kParts; ++h, k += W) {
      const V v = cpu::bf16_lanes_to_float<W>(s + k) * scale + cpu::load_lanes<W>(m + k);
      cpu::store_lanes<W>(buf + k, v);
      top_lanes[h] = cpu::lanes_max<W>(top_lanes[h], v);
    }
  float top = -std::numeric_limits<float>::infinity();
  for (int64_t l = 0; l < L; ++l) top = std::max(top, top_lanes[l / W][l % W]);
  for (int64_t j = full; j < n; ++j) {
    buf[j] = cpu::bf16_to_float(s[j]) * scale + m[j];
    top = std::max(top, buf[j]);
  }
  for (int64_t h = 0; h < kParts; ++h) sum_lanes[h] = V{};
  for (int64_t j = 0; j < full; j += L)
    for (int64_t h = 0, k = j; h < kParts; ++h, k += W) {
      const V e = cpu::exp_approx<W>(cpu::load_lanes<W>(buf + k) - top);
      cpu::store_lanes<W>(buf + k, e);
      sum_lanes[h] += e;
    }
  float sum = 0;
  for (int64_t l = 0; l < L; ++l) sum += sum_lanes[l / W][l % W];
  for (int64_t j = full; j < n; ++j) sum += buf[j] = cpu::exp_approx(buf[j] - top);
  const float inv = 1.0f / sum;
  for (int64_t j = 0; j < full; j += W) cpu::float_lanes_to_bf16<W>(cpu::load_lanes<W>(buf + j) * inv, p + j);
  for (int64_t j = full; j < n; ++j) p[j] = cpu::float_to_bf16(buf[j] * inv);
}

JOULE_VECTOR_CLONES
void softmax_row(const uint16_t* s, const float* m, float scale, int64_t n, float* buf, uint16_t* p) {
  if (cpu::native_lanes() == 16)
    softmax_row_lanes<16>(s, m, scale, n, buf, p);
  else
    softmax_row_lanes<8>(s, m, scale, n, buf, p);
}

// ds = scale * p * (g - <g, p>) for one row of n; `buf` holds the products.
JOULE_VECTOR_CLONES
void softmax_backward_row(const uint16_t* g, const uint16_t* p, float scale, int64_t n, float* buf, uint16_t* ds) {
  for (int64_t j = 0; j < n; ++j) buf[j] = cpu::bf16_to_float(g[j]) * cpu::bf16_to_float(p[j]);
  const float dot = cpu::lanes_sum(buf, n);
  for (int64_t j = 0; j < n; ++j)
    ds[j] = cpu::float_to_bf16(scale * cpu::bf16_to_float(p[j]) * (cpu::bf16_to_float(g[j]) - dot));
}

// With dropout (0 < p < 1) each row's probabilities p are kept for backward and the row dropped as train_dropout
// drops them, in the same pass: y = mask ? bf16(p / (1 - p_drop)) : 0, its keep bits drawn as the same call would draw
// them. Backward forms train_dropout's gradient of the row (the same rounding) and the softmax's from it, so the pair
// gives the composition's bits both ways without its [B, heads, Lq, Lk] intermediate in either.
struct CpuScaledMaskedSoftmax : torch::autograd::Function<CpuScaledMaskedSoftmax> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& scores, const torch::Tensor& mask_bias,
                               double scale, double dropout_p) {
    RECORD_FUNCTION(dropout_p > 0 ? "joule::attention_softmax_dropout" : "joule::attention_softmax",
                    std::vector<c10::IValue>());
    const torch::Tensor s = scores.contiguous();
    const int64_t n = s.size(-1), rows = s.numel() / n, rows_per_batch = rows / s.size(0), queries = s.size(-2);
    // One mask row for every query of a batch row ([B, 1, 1, Lk]), or one for each query ([B, 1, Lq, Lk]).
    const int64_t mask_rows = mask_bias.size(-2);
    const torch::Tensor m = mask_bias.to(torch::kFloat).contiguous().view({s.size(0) * mask_rows, n});
    torch::Tensor p = torch::empty_like(s, torch::MemoryFormat::Contiguous);
    std::optional<DropoutDraw> draw;
    torch::Tensor keep, y = p;
    if (dropout_p > 0) {
      draw.emplace(dropout_p, p);
      keep = torch::empty(s.sizes(), s.options().dtype(torch::kUInt8));
      y = torch::empty_like(p);
    }
    const uint16_t* sp = cpu::bf16_bits(s);
    const float* mp = m.data_ptr<float>();
    uint16_t *pp = cpu::bf16_bits(p), *yp = cpu::bf16_bits(y);
    uint8_t* kp = draw ? keep.data_ptr<uint8_t>() : nullptr;
    const float sc = static_cast<float>(scale), drop_scale = draw ? draw->scale() : 1.0f;
    at::parallel_for(0, rows, kRowGrain, [&](int64_t r0, int64_t r1) {
      std::vector<float> buf(n);
      for (int64_t r = r0; r < r1; ++r) {
        softmax_row(sp + r * n, mp + ((r / rows_per_batch) * mask_rows + (mask_rows == 1 ? 0 : r % queries)) * n, sc, n,
                    buf.data(), pp + r * n);
        if (!draw) continue;
        draw->fill_mask(r * n, n, kp + r * n);
        dropout_scale_bf16(pp + r * n, kp + r * n, drop_scale, n, yp + r * n);
      }
    });
    ctx->save_for_backward({p, keep});
    ctx->saved_data["scale"] = scale;
    ctx->saved_data["dropout_scale"] = static_cast<double>(drop_scale);
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &p = saved[0], &keep = saved[1];
    RECORD_FUNCTION(keep.defined() ? "joule::attention_softmax_dropout_backward" : "joule::attention_softmax_backward",
                    std::vector<c10::IValue>());
    const torch::Tensor g = grads[0].to(torch::kBFloat16).contiguous();
    const int64_t n = p.size(-1), rows = p.numel() / n;
    torch::Tensor ds = torch::empty_like(p, torch::MemoryFormat::Contiguous);
    const uint16_t *gp = cpu::bf16_bits(g), *pp = cpu::bf16_bits(p);
    const uint8_t* kp = keep.defined() ? keep.data_ptr<uint8_t>() : nullptr;
    uint16_t* dp = cpu::bf16_bits(ds);
    const float sc = static_cast<float>(ctx->saved_data["scale"].toDouble());
    const float drop_scale = static_cast<float>(ctx->saved_data["dropout_scale"].toDouble());
    at::parallel_for(0, rows, kRowGrain, [&](int64_t r0, int64_t r1) {
      std::vector<float> buf(n);
      std::vector<uint16_t> dropped(kp ? n : 0);  // the row's gradient before dropout
      for (int64_t r = r0; r < r1; ++r) {
        const uint16_t* gr = gp + r * n;
        if (kp) {
          dropout_scale_bf16(gr, kp + r * n, drop_scale, n, dropped.data());
          gr = dropped.data();
        }
        softmax_backward_row(gr, pp + r * n, sc, n, buf.data(), dp + r * n);
      }
    });
    return {ds, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

torch::Tensor scaled_masked_softmax(const torch::Tensor& scores, const torch::Tensor& mask_bias, double scale,
                                    double dropout_p) {
  TORCH_CHECK(dropout_p >= 0 && dropout_p <= 1, "scaled_masked_softmax: dropout p must be in [0, 1], got ", dropout_p);
  if (scores.device().is_cpu() && scores.scalar_type() == torch::kBFloat16 && scores.dim() == 4 && dropout_p < 1)
    return CpuScaledMaskedSoftmax::apply(scores, mask_bias, scale, dropout_p);
  const torch::Tensor p =
      torch::softmax(scores.to(torch::kFloat).mul(scale).add(mask_bias), -1).to(scores.scalar_type());
  return train_dropout(p, dropout_p);
}

}  // namespace joule::models
