// The [sim] section of the run config: the cluster whose clock a --device trainium-sim run advances. No LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "launch/util/options.h"

namespace joule::sim {

struct SimOptions {
  static constexpr const char* kTable = "sim";
  std::string instance = "trn1.32xlarge";  // an instance profile (configs/hardware)
  int64_t nodes = 16;

  std::vector<OptionField> fields() { return {{"instance", &instance}, {"nodes", &nodes, OptionRange{1, 65536}}}; }
  void validate() const { check_section_ranges(*this); }
};

}  // namespace joule::sim
