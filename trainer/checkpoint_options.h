// The [checkpoint] section of the run config: when the checkpoint policy (trainer/checkpoint_policy.h) saves and
// how many checkpoints are kept. No LibTorch.
#pragma once

#include <cstdint>
#include <vector>

#include "launch/util/options.h"

namespace joule::trainer {

struct CheckpointOptions {
  static constexpr const char* kTable = "checkpoint";
  int64_t every_steps = 0;   // 0: off
  double every_minutes = 0;  // 0: off
  int64_t keep = 3;          // the newest complete checkpoints kept

  std::vector<OptionField> fields() {
    return {{"every_steps", &every_steps, at_least(0), "0: off"},
            {"every_minutes", &every_minutes, at_least(0), "0: off"},
            {"keep", &keep, at_least(1)}};
  }
  void validate() const { check_section_ranges(*this); }
};

}  // namespace joule::trainer
