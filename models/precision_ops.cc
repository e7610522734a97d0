#include "models/precision_ops.h"

#include "models/attention_softmax.h"

namespace joule::models {

torch::Tensor PrecisionOps::operand(const torch::Tensor& x) const {
  return x.scalar_type() == compute_dtype() ? x : x.to(compute_dtype());
}

torch::Tensor PrecisionOps::linear(const torch::Tensor& x, const torch::Tensor& weight,
                                   const torch::Tensor& bias) const {
  if (precision_ == Precision::kFp32) return torch::nn::functional::linear(x, weight, bias);
  return torch::nn::functional::linear(operand(x), operand(weight), bias.defined() ? operand(bias) : bias);
}

torch::Tensor PrecisionOps::layer_norm(const torch::Tensor& x, torch::nn::LayerNorm& norm) const {
  return norm(x.scalar_type() == torch::kFloat ? x : x.to(torch::kFloat));
}

torch::Tensor PrecisionOps::attention_probs(const torch::Tensor& scores, const torch::Tensor& mask_bias,
                                            double scale) const {
  if (precision_ == Precision::kFp32) return torch::softmax(scores.add_(mask_bias), -1);
  return scaled_masked_softmax(scores, mask_bias, scale);
}

torch::Tensor PrecisionOps::for_loss(const torch::Tensor& logits) const {
  return logits.scalar_type() == torch::kFloat ? logits : logits.to(torch::kFloat);
}

}  // namespace joule::models
