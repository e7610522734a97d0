// The precision policy inside BertForPreTraining: every place the model's arithmetic depends on the precision goes
// through one of these, so the model code reads the same in fp32 and bf16 and the recipe is written down once.
//
// bf16 mixed precision (as the anchors' recipes: NVIDIA's AMP, Megatron, llm.c):
//   - parameters, their gradients and the optimizer state stay fp32 (master weights); each matmul casts its weight to
//     bf16 on the way in; on the CPU its weight gradient is computed in fp32 from the bf16 operands and added by
//     oneDNN's GEMM straight into the fp32 gradient (no bf16 copy of it), the bias gradient summed in fp32 (where
//     oneDNN has no bf16 kernels, each of those GEMMs emulated in an fp32 one with the same numbers);
//   - Linear layers, the attention products and the MLM decoder run in bf16 (fp32 accumulation inside the GEMM);
//   - the residual stream and LayerNorm stay fp32; softmax's max and sum, GELU's arithmetic and the losses run in
//     fp32 while the tensors kept for backward (matmul inputs, attention probabilities, GELU's input) are bf16;
//   - dropout draws the same keep masks whatever the dtype.
// In fp32 every function is exactly the fp32 model's original operation; its Linear layers' GEMMs (and on the CPU the
// attention's products) run on the BLAS LibTorch calls, or on oneDNN's sgemm where the run chose that path
// (launch/blas_core.h Fp32Gemm): the same products up to summation order.
#pragma once

#include <memory>
#include <utility>

#include <torch/torch.h>

#include "launch/blas_core.h"
#include "models/bf16_linear.h"
#include "models/fp32_gemm.h"
#include "models/precision.h"

namespace joule::models {

class PrecisionOps {
 public:
  explicit PrecisionOps(Precision p = Precision::kFp32, launch::Fp32Gemm fp32_gemm = launch::Fp32Gemm::kBlas)
      : precision_(p), fp32_gemm_(fp32_gemm) {}
  Precision precision() const { return precision_; }
  launch::Fp32Gemm fp32_gemm() const { return fp32_gemm_; }
  torch::Dtype compute_dtype() const { return precision_ == Precision::kBf16 ? torch::kBFloat16 : torch::kFloat; }
  // bf16 weights packed for oneDNN (models/bf16_linear.h), read by the bf16 Linear layers where autograd records
  // nothing; a weight without a pack (or changed since) is read as it is.
  void use_packed_weights(std::shared_ptr<const PackedWeights> packed) { packed_ = std::move(packed); }
  const PackedWeights* packed_weights() const { return packed_.get(); }

  // x in the matmul dtype (a no-op in fp32).
  torch::Tensor operand(const torch::Tensor& x) const;
  // x W^T + b with x, W and b in the matmul dtype; the output is in that dtype. fp32 on the CPU: forward and both
  // backward GEMMs through joule's sgemm calls on the run's path, the weight gradient added into its .grad
  // (models/fp32_gemm.h fp32_linear; on oneDNN, a joule::Error if this joule was built without it). bf16 on the CPU:
  // models/bf16_linear.h (the bias inside the GEMM; while autograd records, the weight gradient added into its fp32
  // .grad; where its oneDNN kernels do not run, each GEMM emulated in an fp32 one).
  torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) const;
  torch::Tensor linear(const torch::Tensor& x, torch::nn::Linear& layer) const {
    return linear(x, layer->weight, layer->bias);
  }
  // GELU(x W^T + b) (exact erf GELU), in the matmul dtype. In bf16 on the CPU where autograd records nothing
  // (inference, evaluation) one GEMM with the bias and GELU in its epilogue (models/bf16_linear.h).
  torch::Tensor linear_gelu(const torch::Tensor& x, torch::nn::Linear& layer) const;
  // A feed-forward block, GELU(x W_up^T + b_up) W_down^T + b_down, in the matmul dtype: linear_gelu then linear; in
  // bf16 inference where the pair is packed together (PackedWeights::add_feed_forward), bf16_feed_forward's chunks.
  torch::Tensor feed_forward(const torch::Tensor& x, torch::nn::Linear& up, torch::nn::Linear& down) const;
  // LayerNorm in fp32 whatever x's dtype; fp32 out.
  torch::Tensor layer_norm(const torch::Tensor& x, torch::nn::LayerNorm& norm) const;
  // The residual stream's step: y = LayerNorm(dropout(a, p) + residual) in fp32, and y in the matmul dtype (what the
  // next matmuls read); p = 0: no dropout. In bf16 on the CPU one pass forward and one backward
  // (models/residual_norm.h); in fp32 (and off the CPU) train_dropout and LibTorch's add, norm and cast.
  std::pair<torch::Tensor, torch::Tensor> add_layer_norm(const torch::Tensor& a, const torch::Tensor& residual,
                                                         torch::nn::LayerNorm& norm, double dropout_p = 0.0) const;
  // The attention's two products on the per-head views [B, heads, L, head_dim] of [B, L, hidden] tensors:
  // scores = q k^T [B, heads, L, L], and context = probs v back as [B, L, hidden]. In fp32 on the CPU one sgemm per
  // head on the views as they are, on the run's fp32 GEMM path, differentiable (models/fp32_gemm.h: no layout
  // copies forward or backward); in bf16 on the CPU where autograd records nothing, oneDNN's batched matmul on the
  // views (bf16_batched_matmul); where joule's bf16 GEMMs do not run, the fp32 per-head sgemm calls on the widened
  // operands, the product rounded to bf16 once (differentiable); otherwise LibTorch's matmul.
  torch::Tensor attention_scores(const torch::Tensor& q, const torch::Tensor& k) const;
  torch::Tensor attention_context(const torch::Tensor& probs, const torch::Tensor& v) const;
  // The whole attention, context = dropout(softmax(q k^T * scale + mask_bias), p) v as [B, L, hidden], from the
  // per-head views q [B, heads, Lq, head_dim] (not yet scaled), k and v [B, heads, L, head_dim], and mask_bias
  // [B, 1, 1, L] fp32 (or [B, 1, Lq, L]: a mask for each query, as packed rows need); p = 0: no dropout. In bf16 on a
  // GPU one fused kernel (launch::compat::fused_attention: the probabilities are never stored, the softmax runs in fp32
  // inside it); otherwise attention_scores, attention_probs (with the dropout) and attention_context, with the fp32
  // model's order of operations in fp32.
  torch::Tensor attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                          const torch::Tensor& mask_bias, double scale, double dropout_p) const;
  // Logits for a loss or an argmax: fp32.
  torch::Tensor for_loss(const torch::Tensor& logits) const;

 private:
  // train_dropout(softmax(scale * scores + mask_bias), dropout_p) over keys; in bf16 one pass per row on the CPU
  // (scaled_masked_softmax), in fp32 the original `softmax(scores * scale + mask)` order of operations (scale applied
  // to the queries by `attention`; see `attention_scale_in_softmax`).
  torch::Tensor attention_probs(const torch::Tensor& scores, const torch::Tensor& mask_bias, double scale,
                                double dropout_p) const;
  // Whether attention_probs applies the 1/sqrt(d) scale itself (bf16) or `attention` scales the queries (fp32).
  bool attention_scale_in_softmax() const { return precision_ == Precision::kBf16; }

  Precision precision_;
  launch::Fp32Gemm fp32_gemm_;
  std::shared_ptr<const PackedWeights> packed_;
};

// Whether a GEMM with this bf16 CPU operand is emulated: joule was built with oneDNN and its bf16 GEMMs do not run
// here (bf16_gemms_available: a processor without AVX-512). A joule without oneDNN keeps LibTorch's bf16 matmul.
bool emulates_bf16_gemm(const torch::Tensor& a);
// a b (torch::matmul's broadcasting) as PrecisionOps runs a bf16 GEMM where emulates_bf16_gemm: the bf16 operands
// widened to fp32 (exactly), LibTorch's fp32 matmul, the product rounded to bf16 once. Differentiable.
torch::Tensor emulated_bf16_matmul(const torch::Tensor& a, const torch::Tensor& b);
// The same for the attention's products on per-head views, a [B, H, m, k] and b [B, H, k, n]: the widened operands
// through fp32_batched_matmul's sgemm calls on `gemm`'s path (no per-head selects or layout copies, which LibTorch's
// bmm makes), laid out as `out` says, rounded to bf16 once; undefined (nothing widened) where a is not emulated or
// fp32_batched_matmul would not take them widened. Differentiable.
torch::Tensor emulated_bf16_heads_matmul(const torch::Tensor& a, const torch::Tensor& b, launch::Fp32Gemm gemm,
                                         HeadsOut out = HeadsOut::kHeadsFirst);

}  // namespace joule::models
