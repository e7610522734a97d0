// Training-mode dropout. On the CPU, LibTorch 1.13's dropout draws a float mask with bernoulli_ (a locked
// per-element generator call), divides it, multiplies, and keeps the 4-byte mask for backward. This one derives a
// keep bit per element from a counter-based hash of one 64-bit seed drawn from torch's default CPU generator, so it
// is seeded by torch::manual_seed and resumes bit-exactly from the generator state checkpoints save; it keeps a
// 1-byte mask and runs in parallel chunks whose results do not depend on the thread count. fp32 and bf16 tensors draw
// the same masks. On a GPU, torch::dropout runs with the device's generator reseeded, per call, from the CPU generator:
// seeded and resumed the same way, with the device's own masks. Other CPU dtypes get torch::dropout.
#pragma once

#include <torch/torch.h>

namespace joule::models {

// x with each element zeroed with probability p and the rest scaled by 1 / (1 - p); differentiable in x.
torch::Tensor train_dropout(const torch::Tensor& x, double p);

// For a device kernel that draws its own dropout masks (the fused attention): the device's default generator
// reseeded from the CPU generator, as train_dropout does before each device call. No-op on the CPU.
void reseed_device_dropout(const torch::Device& device);

// One CPU dropout call's keep bits, for kernels that fuse dropout into their own pass (models/residual_norm.h):
// drawn from the same seed and counters as train_dropout, so a fused kernel drops exactly the elements train_dropout
// would have dropped at that point of the generator's stream.
class DropoutDraw {
 public:
  // Draws the call's seed from torch's default CPU generator; 0 < p < 1.
  explicit DropoutDraw(double p);
  // mask[i] = 1 when element `offset + i` of the tensor is kept (any offset, any n).
  void fill_mask(int64_t offset, int64_t n, uint8_t* mask) const;
  float scale() const { return scale_; }  // 1 / (1 - p)

 private:
  uint64_t seed_;
  uint64_t keep_below_;
  float scale_;
};

}  // namespace joule::models
