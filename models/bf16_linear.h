// The bf16 Linear layer of training on the CPU, from its fp32 master weight: y = x W^T + b with the weight cast to
// bf16 on the way in and the bias added inside oneDNN's GEMM (no separate pass over y); backward computes the weight
// gradient in fp32 from the bf16 operands and has the GEMM add it straight into the weight's fp32 .grad when it has
// one (the gradient buckets' views: no bf16 dW written, cast and added; stored, not added, where ZeroGradientScope
// says it holds zeros), and sums the bias gradient over rows in fp32 from the bf16 dy in one pass. dx = dy W stays
// LibTorch's bf16 GEMM. The parameter's accumulator then gets no tensor
// to add and still runs its post hooks (the gradient reducer marks the parameter ready there). A weight ZeRO-1 holds
// in bf16 is used as it is and gets a bf16 gradient. Inference (no autograd) holds bf16 weights and biases and runs
// each Linear as one GEMM, GELU included.
#pragma once

#include <cstddef>
#include <memory>
#include <unordered_map>
#include <vector>

#include <torch/torch.h>

namespace joule::models {

struct PackedWeight;       // one weight in oneDNN's blocked layout (bf16_linear.cc)
struct PackedFeedForward;  // a feed-forward block's two weights, packed in chunks (bf16_linear.cc)

// bf16 Linear weights reordered once into the blocked layout oneDNN's matmul reads fastest on this CPU (on AMX, tiles
// of bf16 pairs), for a model whose weights no longer change: inference. A weight in its plain [out, in] layout is
// reordered by every GEMM that reads it, a pass over the whole weight per call. The packs sit beside the weights
// (the model keeps its plain ones: they are its parameters), and a pack is used only while its weight is unchanged.
class PackedWeights {
 public:
  PackedWeights();
  ~PackedWeights();
  PackedWeights(const PackedWeights&) = delete;
  PackedWeights& operator=(const PackedWeights&) = delete;

  // Packs a 2-D bf16 CPU weight [out, in]; false (nothing packed) for any other, or where !bf16_gemms_available().
  bool add(const torch::Tensor& weight);
  // Packs a feed-forward block's weights, `up` [inner, hidden] and `down` [hidden, inner], for bf16_feed_forward: in
  // chunks of the inner dimension, `up`'s rows and `down`'s columns; false (nothing packed) as for add, or where the
  // shapes do not pair.
  bool add_feed_forward(const torch::Tensor& up, const torch::Tensor& down);
  // Weights packed: each add counts one, each add_feed_forward two.
  size_t size() const { return packs_.size() + 2 * feed_forward_.size(); }
  size_t bytes() const;
  // This weight's pack, or nullptr: never added, or changed since (another storage, or written in place).
  const PackedWeight* find(const torch::Tensor& weight) const;
  // This pair's chunked packs, or nullptr: never added together, or either changed since.
  const PackedFeedForward* find_feed_forward(const torch::Tensor& up, const torch::Tensor& down) const;

 private:
  std::unordered_map<const c10::TensorImpl*, std::unique_ptr<PackedWeight>> packs_;
  std::unordered_map<const c10::TensorImpl*, std::unique_ptr<PackedFeedForward>> feed_forward_;  // by `up`
};

// While one lives, the gradients it was given (fp32 weight gradients the caller has just zeroed: the trainer's buckets
// at the start of a step) are known to hold zeros: the first Linear backward (bf16, or fp32 on the CPU) that adds a
// weight gradient into one of them has its GEMM store the product instead (no read of the zeros: about 5 % of a
// bert-base bf16 step on Zen 5), and any later one adds as before. Sound without help from the other writers: autograd
// adds a leaf's other gradients (the tied MLM decoder weight's embedding gradient) in the leaf's accumulator, which
// runs only after every node that feeds it, so after every Linear backward of that weight. One scope at a time (the
// trainer's step); the marks go with it.
class ZeroGradientScope {
 public:
  explicit ZeroGradientScope(const std::vector<torch::Tensor>& zeroed_gradients);
  ~ZeroGradientScope();
  ZeroGradientScope(const ZeroGradientScope&) = delete;
  ZeroGradientScope& operator=(const ZeroGradientScope&) = delete;
};
// For a Linear layer's backward (bf16's here, fp32's in models/fp32_gemm.h): the weight's .grad where the weight
// gradient's GEMM can write into it (a leaf's contiguous fp32 CPU .grad of the weight's shape, autograd not recording:
// a double backward needs dW as a tensor of the graph), else an undefined tensor; and whether `grad` is marked as
// holding zeros, unmarking it: its first writer stores, every later one adds.
torch::Tensor gradient_to_write_into(const torch::Tensor& weight);
bool take_zero_gradient(const torch::Tensor& grad);

// Whether joule's bf16 GEMMs run here: a joule built with oneDNN, on a CPU oneDNN has bf16 matmul kernels for (oneDNN
// 2.x: AVX-512 or AMX; none with AVX2 alone, as on AMD Zen 3), asked once by describing one small matmul. Where they
// do not, bf16_linear emulates each GEMM in an fp32 one (operands widened exactly, LibTorch's fp32 GEMM, the epilogue
// in fp32, one rounding to bf16: the same numbers to the summation order), bf16_batched_matmul_applies says no
// (PrecisionOps emulates the attention's products likewise), and PackedWeights packs nothing.
bool bf16_gemms_available();

// For tests: while one lives, bf16_gemms_available() says no, as on a CPU without oneDNN's bf16 kernels.
class WithoutBf16GemmsForTesting {
 public:
  WithoutBf16GemmsForTesting();
  ~WithoutBf16GemmsForTesting();
  WithoutBf16GemmsForTesting(const WithoutBf16GemmsForTesting&) = delete;
  WithoutBf16GemmsForTesting& operator=(const WithoutBf16GemmsForTesting&) = delete;
};

// Whether bf16_linear takes these operands: a bf16 CPU input, an fp32 or bf16 CPU weight, an fp32 or bf16 bias or
// none, and a joule built with oneDNN. Otherwise PrecisionOps::linear keeps LibTorch's composition.
bool bf16_linear_applies(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias);

enum class Activation { kNone, kGelu };  // kGelu: exact (erf) GELU, as torch::gelu

// act(x W^T + b): x [..., in] bf16, weight [out, in] fp32 or bf16, bias [out] fp32, bf16 or undefined: [..., out]
// bf16, differentiable in all three. Where autograd records nothing (inference) it is one GEMM with the bias and the
// GELU in its epilogue, applied to the fp32 accumulator before the one rounding to bf16; while autograd records, GELU
// is joule's table pass on the GEMM's bf16 output (kept: backward needs it), and backward takes GELU's gradient and
// the bias gradient in one pass (models/gelu.h). `packed`: where it holds this weight's pack, inference reads that
// instead of the plain weight (the same products).
torch::Tensor bf16_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                          Activation activation = Activation::kNone, const PackedWeights* packed = nullptr);

// A BERT feed-forward block in inference, GELU(x up^T + b_up) down^T + b_down, on weights and biases held in bf16
// whose pair `packed` holds (find_feed_forward; a joule::InternalError otherwise), x [..., hidden] bf16: [..., hidden]
// bf16, no autograd. In chunks of the inner dimension (hidden wide where it divides it): each chunk's up-projection
// is one GEMM with its bias, then GELU (models/gelu.h) on its bf16 output as its own pass (as LibTorch's bf16
// composition rounds it: the GEMM's output, then GELU's), then the chunk's down-projection added into an fp32 sum
// (the down-projection's bias with the first chunk, the sum rounded to bf16 with the last). Why: oneDNN 2.6's AMX
// GEMM runs a down-projection of K = 3,072 at 2/3 of its rate for K = 768, and its erf GELU epilogue costs a third of
// the up-projection (BENCHMARKS.md, "Inference on the Intel Xeon with AMX").
torch::Tensor bf16_feed_forward(const torch::Tensor& x, const torch::Tensor& up, const torch::Tensor& up_bias,
                                const torch::Tensor& down, const torch::Tensor& down_bias, const PackedWeights& packed);

// Whether bf16_batched_matmul takes these: 4-D bf16 CPU tensors, autograd recording nothing, bf16_gemms_available().
bool bf16_batched_matmul_applies(const torch::Tensor& a, const torch::Tensor& b);

// out [B, H, m, n] = a [B, H, m, k] b [B, H, k, n], bf16 with fp32 accumulation, every operand in whatever strides it
// has (the attention's per-head views of [B, L, hidden]: no copies in or out), on oneDNN's batched matmul. No
// autograd.
void bf16_batched_matmul(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& out);

}  // namespace joule::models
