// The [optimizer] section of the run config: the optimizer by name, its hyper-parameters and the learning-rate
// schedule (linear warm-up, then polynomial decay). Owned by the optimizer (trainer/optimizer.h). No LibTorch.
#pragma once

#include <string>
#include <vector>

#include "launch/util/options.h"

namespace joule::trainer {

// The update rule: LAMB (NVIDIA's BERT recipe) or AdamW.
enum class OptimizerName { lamb, adamw };
inline const std::vector<std::string> kOptimizerWords = {"lamb", "adamw"};  // OptimizerName's order

// Where the optimizer state lives: whole on every rank, or ZeRO stage 1 (each rank holds and updates 1/N of it, the
// gradients reduce-scattered and the parameters all-gathered after the update).
enum class OptimizerSharding { none, zero1 };
// The words of optimizer.shard and --shard, in OptimizerSharding's order.
inline const std::vector<std::string> kShardingWords = {"none", "zero1"};
inline const std::string& sharding_name(OptimizerSharding s) { return kShardingWords.at(static_cast<size_t>(s)); }

struct OptimizerOptions {
  static constexpr const char* kTable = "optimizer";
  OptimizerName name = OptimizerName::lamb;
  double lr = 6e-3;
  double warmup_fraction = 0.2843;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-6;
  double weight_decay = 0.01;  // not applied to biases and LayerNorm parameters
  double max_grad_norm = 1.0;  // global-norm clipping before the update; 0 turns it off
  OptimizerSharding shard = OptimizerSharding::none;

  std::vector<OptionField> fields();
  void validate() const;
};

}  // namespace joule::trainer
