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
// gradients reduce-scattered and the parameters all-gathered after the update); `automatic` is resolved per run
// (resolve_sharding).
enum class OptimizerSharding { none, zero1, automatic };
// The words of optimizer.shard, in OptimizerSharding's order; --shard of `bench train` and `plan` takes the first two.
inline const std::vector<std::string> kShardingWords = {"none", "zero1", "auto"};
inline const std::vector<std::string> kExplicitShardingWords = {"none", "zero1"};
inline const std::string& sharding_name(OptimizerSharding s) { return kShardingWords.at(static_cast<size_t>(s)); }

// optimizer.shard resolved for a run of `world` ranks whose update runs on the host's cores (`on_cpu`): auto is zero1
// there with several ranks (unsharded, every rank updates every parameter on its own cores, the same work N times;
// split, each updates 1/N and holds 1/N of the moments), none elsewhere (one rank has nothing to split; CUDA and the
// simulated Trainium's cluster time have not been measured with it). `why` says which.
OptimizerSharding resolve_sharding(OptimizerSharding asked, int world, bool on_cpu, std::string* why = nullptr);

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
  OptimizerSharding shard = OptimizerSharding::automatic;

  std::vector<OptionField> fields();
  void validate() const;
};

}  // namespace joule::trainer
