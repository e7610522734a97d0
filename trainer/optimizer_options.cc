#include "trainer/optimizer_options.h"

namespace joule::trainer {

std::vector<OptionField> OptimizerOptions::fields() {
  const OptionRange unit_open_above{0, 1, false, true};
  return {{"name", option_choice(&name, kOptimizerWords)},
          {"lr", &lr, above(0)},
          {"warmup_fraction", &warmup_fraction, unit_open_above},
          {"beta1", &beta1, unit_open_above},
          {"beta2", &beta2, unit_open_above},
          {"eps", &eps, above(0)},
          {"weight_decay", &weight_decay, at_least(0)},
          {"max_grad_norm", &max_grad_norm, at_least(0), "0: no clipping"},
          {"shard",
           option_choice(&shard, kShardingWords),
           {},
           "none | zero1 (optimizer state split over the ranks: 1/N of the moments per rank) | auto (zero1 on CPUs "
           "with several ranks, else none)"}};
}

OptimizerSharding resolve_sharding(OptimizerSharding asked, int world, bool on_cpu, std::string* why) {
  if (asked != OptimizerSharding::automatic) return asked;
  const bool split = on_cpu && world > 1;
  if (why)
    *why = split ? std::to_string(world) + " ranks updating on CPUs: each updates 1/" + std::to_string(world) +
                       " of the parameters instead of all of them"
                 : (world <= 1 ? "one rank: nothing to split" : "not a CPU device: the whole state on every rank");
  return split ? OptimizerSharding::zero1 : OptimizerSharding::none;
}

void OptimizerOptions::validate() const { check_section_ranges(*this); }

}  // namespace joule::trainer
