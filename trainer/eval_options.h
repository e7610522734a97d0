// The [eval] section of the run config: how often a training run evaluates on the held-out set, on how much of it,
// and the accuracy that ends the run (time-to-accuracy). Owned by the evaluator (trainer/evaluator.h). No LibTorch.
#pragma once

#include <cstdint>
#include <vector>

#include "launch/util/options.h"

namespace joule::trainer {

struct EvalOptions {
  static constexpr const char* kTable = "eval";
  int64_t every_steps = 0;         // 0: at the end only
  double target_mlm_accuracy = 0;  // > 0: stop once reached (time-to-accuracy)
  int64_t batch = 32;              // sequences per eval batch
  int64_t max_batches = 50;        // eval batches per evaluation, over all ranks

  std::vector<OptionField> fields() {
    return {{"every_steps", &every_steps, at_least(0), "0: at the end only"},
            {"target_mlm_accuracy", &target_mlm_accuracy, OptionRange{0, 1, false, false}, "0: none"},
            {"batch", &batch, OptionRange{1, 1 << 20}},
            {"max_batches", &max_batches, at_least(1)}};
  }
  void validate() const { check_section_ranges(*this); }
};

}  // namespace joule::trainer
