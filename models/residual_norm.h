// LayerNorm(a + residual) for inference in bf16, one pass per row: the encoder's residual stream stays fp32 and the
// next matmuls read its bf16 copy, so the add, the norm and the cast to bf16 that would each read and write the whole
// activation become one (PrecisionOps::add_layer_norm uses it under c10::InferenceMode; training and evaluation keep
// LibTorch's ops and their autograd). No autograd.
#pragma once

#include <utility>

#include <torch/torch.h>

namespace joule::models {

// `a` [..., n] bf16, `residual` [..., n] fp32, `gamma`/`beta` [n] fp32: {y fp32, y in bf16}, y = LayerNorm(a +
// residual) with eps, the mean and variance in fp32 over each row (16 fixed lanes: the same result on every run).
std::pair<torch::Tensor, torch::Tensor> add_layer_norm_bf16(const torch::Tensor& a, const torch::Tensor& residual,
                                                            const torch::Tensor& gamma, const torch::Tensor& beta,
                                                            double eps);

}  // namespace joule::models
