// The [optimizer] section of the run config: the optimizer by name, its hyper-parameters and the learning-rate
// schedule (linear warm-up, then polynomial decay). Owned by the optimizer (trainer/optimizer.h). No LibTorch.
#pragma once

#include <string>
#include <vector>

#include "launch/util/options.h"

namespace joule::trainer {

struct OptimizerOptions {
  static constexpr const char* kTable = "optimizer";
  std::string name = "lamb";  // "lamb" | "adamw"
  double lr = 6e-3;
  double warmup_fraction = 0.2843;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-6;
  double weight_decay = 0.01;  // not applied to biases and LayerNorm parameters
  double max_grad_norm = 1.0;  // global-norm clipping before the update; 0 turns it off
  // "none": every rank holds the whole optimizer state; "zero1": ZeRO stage 1, each rank holds and updates 1/N of it
  // (gradients reduce-scattered, parameters all-gathered after the update).
  std::string shard = "none";

  std::vector<OptionField> fields();
  void validate() const;
};

}  // namespace joule::trainer
