// Optimizers for BERT pretraining, created by name: "lamb" exactly as NVIDIA's recipe uses apex's
// FusedLAMB (global-norm clipping, bias-corrected moments, decoupled weight decay 0.01 except biases
// and LayerNorm, layer-wise trust ratio ||w|| / ||update|| on the decayed parameters), and "adamw".
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "trainer/optimizer_options.h"

namespace joule::trainer {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  // One update at learning rate `lr` from the parameters' current .grad(): clip by the global norm,
  // update the moments, then the optimizer's own rule. Returns the global gradient norm before clipping.
  // A norm that is not finite (NaN/Inf gradients) leaves parameters, moments and the step count as they were.
  double step(double lr);
  // The global norm of the parameters (one read of each): not finite once an update has written NaN/Inf into them.
  double parameter_norm() const;
  int64_t steps() const { return steps_; }
  // State for checkpoints: "exp_avg.<param>" and "exp_avg_sq.<param>" moments plus the step count.
  std::vector<std::pair<std::string, torch::Tensor>> state() const;
  void load_state(const std::vector<std::pair<std::string, torch::Tensor>>& state, int64_t steps);
  // A fresh step count and zero moments (phase 2 continues from phase-1 weights this way).
  void reset();

 protected:
  Optimizer(std::vector<std::pair<std::string, torch::Tensor>> params, OptimizerOptions options);
  struct Slot {
    std::string name;
    torch::Tensor param, exp_avg, exp_avg_sq;
    bool decay = true;
  };
  // One parameter's update: its gradient times `grad_scale` (the global-norm clipping) feeds the moments, then
  // the optimizer's rule. c1, c2 are the bias corrections 1 - beta^t. This default, in tensor ops, runs on any
  // device: it scales .grad() in place, updates the moments and calls apply_update().
  virtual void update_slot(Slot& slot, double lr, double c1, double c2, double grad_scale);
  // The parameter update from the fresh moments.
  virtual void apply_update(Slot& slot, double lr, double c1, double c2) = 0;
  std::vector<Slot> slots_;
  OptimizerOptions options_;
  int64_t steps_ = 0;
};

std::unique_ptr<Optimizer> create_optimizer(const OptimizerOptions& options,
                                            std::vector<std::pair<std::string, torch::Tensor>> named_parameters);

// NVIDIA's PolyWarmUpScheduler: linear warm-up over `warmup_fraction` of `total_steps`, then
// polynomial decay (power 0.5) to 0 at `total_steps`. `step` counts from 0 (the first update).
double learning_rate(double base_lr, int64_t step, int64_t total_steps, double warmup_fraction, double power = 0.5);

}  // namespace joule::trainer
