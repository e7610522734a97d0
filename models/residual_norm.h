// The encoder's residual step in bf16, LayerNorm(dropout(a) + residual), as one pass per row forward and one
// backward: the residual stream stays fp32 and the next matmuls read its bf16 copy, so the dropout, the add, the norm
// and the cast to bf16, that would each read and write the whole activation (and keep their own copies for
// backward), become one. It keeps for backward what LibTorch's composition keeps: the 1-byte keep mask, the normalized
// sum in fp32 and a reciprocal deviation per row. The keep bits are train_dropout's (models/dropout.h): the same
// elements are dropped as by the unfused composition at the same point of the generator's stream. Every row is
// computed alone and the gamma/beta gradients are summed over fixed blocks of rows in order: the results do not depend
// on the thread count. CPU, bf16 `a`, fp32 residual (PrecisionOps::add_layer_norm chooses it).
#pragma once

#include <utility>

#include <torch/torch.h>

namespace joule::models {

// `a` [..., n] bf16, `residual` [..., n] fp32, `gamma`/`beta` [n] fp32: {y fp32, y in bf16}, y = LayerNorm(dropout(a,
// p) + residual) with eps, the mean and variance in fp32 over each row (16 fixed lanes: the same result on every run).
// p = 0: no dropout. Differentiable in a, residual, gamma and beta (both outputs) when autograd records.
std::pair<torch::Tensor, torch::Tensor> dropout_add_layer_norm_bf16(const torch::Tensor& a,
                                                                    const torch::Tensor& residual,
                                                                    const torch::Tensor& gamma,
                                                                    const torch::Tensor& beta, double p, double eps);

}  // namespace joule::models
