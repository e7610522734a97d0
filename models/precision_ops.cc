#include "models/precision_ops.h"

#include <limits>
#include <string>

#include "launch/torch_compat.h"
#include "launch/util/error.h"
#include "models/attention_softmax.h"
#include "models/dropout.h"
#include "models/fp32_gemm.h"
#include "models/residual_norm.h"

namespace joule::models {
namespace {

// a b, LibTorch's matmul; where joule's oneDNN bf16 GEMMs do not run on a CPU (emulates_bf16_gemm) emulated as
// bf16_linear emulates its GEMMs (models/bf16_linear.h): the bf16 operands widened to fp32 (exactly), the fp32 GEMM,
// the product rounded to bf16 once: exact products and fp32 sums, at the fp32 GEMM's speed less the casts, where
// LibTorch 1.13's own bf16 loops run at 1 % of fp32's speed and sum the products in bf16 (errors of several per cent).
torch::Tensor product(const torch::Tensor& a, const torch::Tensor& b) {
  return emulates_bf16_gemm(a) ? emulated_bf16_matmul(a, b) : torch::matmul(a, b);
}

}  // namespace

bool emulates_bf16_gemm(const torch::Tensor& a) {
#if JOULE_ONEDNN
  return a.scalar_type() == torch::kBFloat16 && a.device().is_cpu() && !bf16_gemms_available();
#else
  (void)a;  // a LibTorch of its own (PyPI's, MKL and oneDNN inside): its bf16 matmul, as before the emulation
  return false;
#endif
}

torch::Tensor emulated_bf16_matmul(const torch::Tensor& a, const torch::Tensor& b) {
  return torch::matmul(a.to(torch::kFloat), b.to(torch::kFloat)).to(torch::kBFloat16);
}

torch::Tensor emulated_bf16_heads_matmul(const torch::Tensor& a, const torch::Tensor& b, launch::Fp32Gemm gemm,
                                         HeadsOut out) {
  if (!emulates_bf16_gemm(a) || !batched_matmul_shapes_apply(a, b, gemm)) return {};
  return fp32_batched_matmul(a.to(torch::kFloat), b.to(torch::kFloat), gemm, out).to(torch::kBFloat16);
}

torch::Tensor PrecisionOps::operand(const torch::Tensor& x) const {
  return x.scalar_type() == compute_dtype() ? x : x.to(compute_dtype());
}

torch::Tensor PrecisionOps::linear(const torch::Tensor& x, const torch::Tensor& weight,
                                   const torch::Tensor& bias) const {
  if (precision_ == Precision::kFp32)
    return fp32_linear_applies(x, weight, bias, fp32_gemm_) ? fp32_linear(x, weight, bias, fp32_gemm_)
                                                            : torch::nn::functional::linear(x, weight, bias);
  const torch::Tensor xc = operand(x);
  if (bf16_linear_applies(xc, weight, bias)) return bf16_linear(xc, weight, bias, Activation::kNone, packed_.get());
  return torch::nn::functional::linear(xc, operand(weight), bias.defined() ? operand(bias) : bias);
}

torch::Tensor PrecisionOps::linear_gelu(const torch::Tensor& x, torch::nn::Linear& layer) const {
  if (precision_ == Precision::kBf16) {
    const torch::Tensor xc = operand(x);
    if (bf16_linear_applies(xc, layer->weight, layer->bias))
      return bf16_linear(xc, layer->weight, layer->bias, Activation::kGelu, packed_.get());
  }
  return torch::gelu(linear(x, layer));
}

torch::Tensor PrecisionOps::feed_forward(const torch::Tensor& x, torch::nn::Linear& up, torch::nn::Linear& down) const {
  const auto bf16_bias = [](const torch::Tensor& b) { return b.defined() && b.scalar_type() == torch::kBFloat16; };
  const bool records =
      torch::GradMode::is_enabled() &&
      (x.requires_grad() || up->weight.requires_grad() || down->weight.requires_grad() ||
       (up->bias.defined() && up->bias.requires_grad()) || (down->bias.defined() && down->bias.requires_grad()));
  if (precision_ == Precision::kBf16 && packed_ && !records && x.scalar_type() == torch::kBFloat16 &&
      bf16_bias(up->bias) && bf16_bias(down->bias) && packed_->find_feed_forward(up->weight, down->weight))
    return bf16_feed_forward(x, up->weight, up->bias, down->weight, down->bias, *packed_);
  return linear(linear_gelu(x, up), down);
}

torch::Tensor PrecisionOps::layer_norm(const torch::Tensor& x, torch::nn::LayerNorm& norm) const {
  return norm(x.scalar_type() == torch::kFloat ? x : x.to(torch::kFloat));
}

std::pair<torch::Tensor, torch::Tensor> PrecisionOps::add_layer_norm(const torch::Tensor& a,
                                                                     const torch::Tensor& residual,
                                                                     torch::nn::LayerNorm& norm,
                                                                     double dropout_p) const {
  if (precision_ == Precision::kBf16 && a.scalar_type() == torch::kBFloat16 &&
      residual.scalar_type() == torch::kFloat && a.device().is_cpu() && norm->options.elementwise_affine())
    return dropout_add_layer_norm_bf16(a, residual, norm->weight, norm->bias, dropout_p, norm->options.eps());
  torch::Tensor y = layer_norm(train_dropout(a, dropout_p) + residual, norm);
  return {y, operand(y)};
}

torch::Tensor PrecisionOps::attention_scores(const torch::Tensor& q, const torch::Tensor& k) const {
  const torch::Tensor kt = k.transpose(-1, -2);
  if (fp32_batched_matmul_applies(q, kt, fp32_gemm_)) return fp32_batched_matmul(q, kt, fp32_gemm_);
  if (torch::Tensor s = emulated_bf16_heads_matmul(q, kt, fp32_gemm_, HeadsOut::kHeadsFirst); s.defined()) return s;
  if (!bf16_batched_matmul_applies(q, kt)) return product(q, kt);
  torch::Tensor scores = torch::empty({q.size(0), q.size(1), q.size(2), kt.size(3)}, q.options());
  bf16_batched_matmul(q, kt, scores);
  return scores;
}

torch::Tensor PrecisionOps::attention_context(const torch::Tensor& probs, const torch::Tensor& v) const {
  const int64_t batch = probs.size(0), heads = probs.size(1), len = probs.size(2), dh = v.size(3);
  if (fp32_batched_matmul_applies(probs, v, fp32_gemm_))
    return fp32_batched_matmul(probs, v, fp32_gemm_, HeadsOut::kHeadsLast).view({batch, len, heads * dh});
  if (torch::Tensor c = emulated_bf16_heads_matmul(probs, v, fp32_gemm_, HeadsOut::kHeadsLast); c.defined())
    return c.view({batch, len, heads * dh});
  if (!bf16_batched_matmul_applies(probs, v))
    return product(probs, v).transpose(1, 2).reshape({batch, len, heads * dh});
  torch::Tensor context = torch::empty({batch, len, heads, dh}, v.options());
  bf16_batched_matmul(probs, v, context.transpose(1, 2));
  return context.view({batch, len, heads * dh});
}

torch::Tensor PrecisionOps::attention_probs(const torch::Tensor& scores, const torch::Tensor& mask_bias, double scale,
                                            double dropout_p) const {
  if (precision_ == Precision::kFp32) return train_dropout(torch::softmax(scores.add_(mask_bias), -1), dropout_p);
  return scaled_masked_softmax(scores, mask_bias, scale, dropout_p);
}

torch::Tensor PrecisionOps::attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const torch::Tensor& mask_bias, double scale, double dropout_p) const {
  const int64_t batch = q.size(0), heads = q.size(1), len = q.size(2), dh = q.size(3);
  if (precision_ == Precision::kBf16 && q.device().is_cuda()) {
    if (dropout_p > 0) reseed_device_dropout(q.device());
    // float's lowest rounds to -inf in bf16 (a row of padding alone would then be NaN): bf16's lowest instead.
    const double lowest = static_cast<double>(std::numeric_limits<c10::BFloat16>::lowest());
    const torch::Tensor mask = mask_bias.clamp_min(lowest).to(q.scalar_type()).expand({batch, heads, len, k.size(2)});
    return launch::compat::fused_attention(q, k, v, mask, dropout_p, scale)
        .transpose(1, 2)
        .reshape({batch, len, heads * dh});
  }
  const torch::Tensor scaled_q = attention_scale_in_softmax() ? q : q.mul(scale);
  return attention_context(attention_probs(attention_scores(scaled_q, k), mask_bias, scale, dropout_p), v);
}

torch::Tensor PrecisionOps::for_loss(const torch::Tensor& logits) const {
  return logits.scalar_type() == torch::kFloat ? logits : logits.to(torch::kFloat);
}

}  // namespace joule::models
