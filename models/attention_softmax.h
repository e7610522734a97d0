// softmax(scale * scores + mask_bias) over the last dimension, for bf16 attention scores: statistics in fp32, the
// probabilities stored (and kept for backward) in bf16. On the CPU one fused pass per row forward and backward (no
// fp32 copy of the [B, heads, L, L] scores is made or kept); elsewhere the same formula in LibTorch ops.
#pragma once

#include <torch/torch.h>

namespace joule::models {

// scores [B, heads, Lq, Lk] (bf16), mask_bias [B, 1, 1, Lk] or [B, 1, Lq, Lk] (fp32: 0 or the lowest float).
// Differentiable in scores. dropout_p > 0: train_dropout(softmax, dropout_p), bit for bit, the same call's keep bits;
// on the CPU in the same pass per row (the probabilities and the dropped ones written together), backward likewise.
torch::Tensor scaled_masked_softmax(const torch::Tensor& scores, const torch::Tensor& mask_bias, double scale,
                                    double dropout_p = 0);

}  // namespace joule::models
