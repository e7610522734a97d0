// Optimizers for BERT pretraining, created by name: "lamb" exactly as NVIDIA's recipe uses apex's
// FusedLAMB (global-norm clipping, bias-corrected moments, decoupled weight decay 0.01 except biases
// and LayerNorm, layer-wise trust ratio ||w|| / ||update|| on the decayed parameters), and "adamw".
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "collectives/reducer.h"
#include "trainer/optimizer_options.h"

namespace joule::trainer {

// ZeRO-1 (optimizer.shard = "zero1"): this rank keeps moments for, and updates, only the elements of each parameter
// in its shard (collectives::GradientReducer::shard_ranges()); what needs whole tensors (the global gradient norm,
// LAMB's per-parameter norms) is summed per parameter on each rank and added over the ranks by `sum_over_ranks`:
// two small all-reduces per step (the gradient norms before clipping, the update and weight norms after the moments).
// A parameter wholly inside one rank's shard gets the very sums of the unsharded optimizer; one a shard boundary cuts
// gets the same sum added in another order (equal to the last bits of a double; on a GPU, where LAMB's norms come
// from float32 multi-tensor norms, to about 1e-7).
// With bf16 weights (collectives/reducer.h), such a parameter's fp32 master of its range lives apart from it:
// `masters` (per parameter, undefined where the parameter's own elements are the master) is what the update writes.
struct OptimizerShard {
  std::vector<collectives::ShardRange> ranges;               // per parameter, in named_parameters order
  std::function<void(std::vector<double>&)> sum_over_ranks;  // in place, the same on every rank
  std::vector<torch::Tensor> masters;                        // empty, or per parameter (GradientReducer::masters())
};

// One piece of optimizer state: elements [begin, begin + values.numel()) of the flattened moment `name`
// ("exp_avg.<param>", "exp_avg_sq.<param>"), whose whole has `numel` elements.
struct StatePiece {
  std::string name;
  int64_t begin = 0, numel = 0;
  torch::Tensor values;  // shaped like the parameter when whole, else 1-D
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update at learning rate `lr` from the parameters' current .grad(): clip by the global norm,
  // update the moments, then the optimizer's own rule. Returns the global gradient norm before clipping.
  // A norm that is not finite (NaN/Inf gradients) leaves parameters, moments and the step count as they were.
  double step(double lr);
  // The global norm of the parameters (one read of each, as the model holds them: bf16 weights in bf16): not finite
  // once an update has written NaN/Inf into them.
  double parameter_norm() const;
  int64_t steps() const { return steps_; }
  bool sharded() const { return static_cast<bool>(shard_sum_); }
  // This rank's state for checkpoints: "exp_avg.<param>" and "exp_avg_sq.<param>" pieces (whole unsharded).
  std::vector<StatePiece> state() const;
  // Bytes of that state on this rank (the whole moments, or this rank's share of them).
  double state_bytes() const;
  // Fills this rank's part of every moment: `read(want)` copies elements [want.begin, want.begin +
  // want.values.numel()) of the flattened moment want.name (want.numel elements in all) into want.values (1-D), or
  // throws naming what is missing.
  using StateReader = std::function<void(const StatePiece& want)>;
  void load_state(const StateReader& read, int64_t steps);
  // From whole moments by name (of the parameters' shapes).
  void load_state(const std::vector<std::pair<std::string, torch::Tensor>>& state, int64_t steps);
  // A fresh step count and zero moments (phase 2 continues from phase-1 weights this way).
  void reset();

 protected:
  Optimizer(std::vector<std::pair<std::string, torch::Tensor>> params, OptimizerOptions options, OptimizerShard shard);
  struct ParameterState {
    std::string name;
    torch::Tensor param;                // the whole parameter (its .grad() fp32)
    torch::Tensor master;               // a bf16 weight's fp32 master of the `count` elements; undefined: in `param`
    int64_t begin = 0, count = 0;       // the elements this rank updates
    torch::Tensor exp_avg, exp_avg_sq;  // `count` elements: the parameter's shape when whole, else 1-D
    bool decay = true;
  };
  // Pass 1 over the slots `active` lists (indices into slots_): each gradient times `grad_scale` (the global-norm
  // clipping) feeds the moments (c1, c2 are the bias corrections 1 - beta^t); writes the sums the second pass needs
  // into norms[2i] and norms[2i + 1] (LAMB's ||u||² and ||w||² over slot i's part). A rule whose update needs no
  // norms may apply it here already.
  virtual void update_moments(const std::vector<size_t>& active, double lr, double c1, double c2, double grad_scale,
                              std::vector<double>& norms) = 0;
  // Pass 2: the parameter updates from the fresh moments, with the norms summed over every rank.
  virtual void apply_updates(const std::vector<size_t>& active, double lr, double c1, double c2,
                             const std::vector<double>& norms) = 0;
  // Whether pass 2 needs the norms of pass 1 (summed over the ranks when sharded).
  virtual bool needs_norms() const = 0;
  // The fp32 weights the slot updates: its master, or its elements of the parameter (the parameter when whole).
  static torch::Tensor weights(const ParameterState& slot);
  std::vector<ParameterState> slots_;
  OptimizerOptions options_;
  int64_t steps_ = 0;
  std::function<void(std::vector<double>&)> shard_sum_;  // empty: unsharded
};

// `shard`: none for an unsharded optimizer (every element of every parameter on this rank).
std::unique_ptr<Optimizer> create_optimizer(const OptimizerOptions& options,
                                            std::vector<std::pair<std::string, torch::Tensor>> named_parameters,
                                            OptimizerShard shard = {});

// NVIDIA's PolyWarmUpScheduler: linear warm-up over `warmup_fraction` of `total_steps`, then
// polynomial decay (power 0.5) to 0 at `total_steps`. `step` counts from 0 (the first update).
double learning_rate(double base_lr, int64_t step, int64_t total_steps, double warmup_fraction, double power = 0.5);

}  // namespace joule::trainer
