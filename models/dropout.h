// Training-mode dropout. On the CPU, LibTorch 1.13's dropout draws a float mask with bernoulli_ (a locked
// per-element generator call), divides it, multiplies, and keeps the 4-byte mask for backward. This one derives a
// keep bit per element from a counter-based hash (SplitMix64), keeps a 1-byte mask and runs in parallel chunks whose
// results do not depend on the thread count. fp32 and bf16 tensors draw the same masks.
//
// Where the masks come from. A tensor's first dimension is its batch rows. Inside a DropoutRows scope (the trainer's
// batches: models/bert.cc opens one per forward) element e of row b in the scope's k-th dropout call is kept by the
// draw keyed by (run seed, the row's index in the run's stream of rows, k, e): a row is dropped the same way whichever
// rank, micro-batch, accumulation step or resumed segment trains it, so 1 x 16, 2 x 8 and 4 x 4 (ranks x micro-batch)
// are one run to fp32 summation order, and no generator state is needed to resume. k is the call's ordinal in the
// forward, the same site (embedding, a layer's attention probabilities, its two residual steps) in every layout.
// Outside a scope (tests, benchmarks, batches that are not a run's), a call draws one 64-bit seed from torch's
// default CPU generator and keys the rows 0..B-1 with it: seeded by torch::manual_seed.
//
// On a GPU, torch::dropout runs with the device's generator reseeded per call: from (seed, first row, k) in a scope,
// else from the CPU generator. The device's masks follow the micro-batch's shape, so on a GPU the same layout repeats
// a run, another layout does not. Other CPU dtypes get torch::dropout.
#pragma once

#include <torch/torch.h>

namespace joule::models {

// While alive, dropout calls on this thread draw from (seed, first_row + b, call ordinal, element) for row b. One at a
// time per thread; not copyable.
class DropoutRows {
 public:
  DropoutRows(uint64_t seed, uint64_t first_row);
  ~DropoutRows();
  DropoutRows(const DropoutRows&) = delete;
  DropoutRows& operator=(const DropoutRows&) = delete;
};

// x with each element zeroed with probability p and the rest scaled by 1 / (1 - p); differentiable in x.
torch::Tensor train_dropout(const torch::Tensor& x, double p);

// For a device kernel that draws its own dropout masks (the fused attention): the device's default generator
// reseeded from the CPU generator, as train_dropout does before each device call. No-op on the CPU.
void reseed_device_dropout(const torch::Device& device);

// One CPU dropout call's keep bits, for kernels that fuse dropout into their own pass (models/residual_norm.h):
// drawn from the same keys as train_dropout, so a fused kernel drops exactly the elements train_dropout would have
// dropped as the same call.
class DropoutDraw {
 public:
  // A call on `x` (its first dimension the rows, numel > 0): takes the next call ordinal of the thread's DropoutRows
  // scope, or a seed from torch's default CPU generator outside one; 0 < p < 1.
  DropoutDraw(double p, const torch::Tensor& x);
  // mask[i] = 1 when element `offset + i` of the (contiguous) tensor is kept (any offset, any n).
  void fill_mask(int64_t offset, int64_t n, uint8_t* mask) const;
  float scale() const { return scale_; }  // 1 / (1 - p)

 private:
  uint64_t seed_;       // the call's key
  uint64_t first_row_;  // the stream index of row 0
  int64_t row_numel_;   // elements per row
  uint64_t keep_below_;
  float scale_;
};

// out[i] = mask[i] ? bf16(in[i] * scale) : 0 over bf16 bit patterns: train_dropout's arithmetic on a bf16 tensor,
// forward (scale = DropoutDraw::scale()) and backward alike, for a fused kernel to apply to its own rows.
void dropout_scale_bf16(const uint16_t* in, const uint8_t* mask, float scale, int64_t n, uint16_t* out);

}  // namespace joule::models
