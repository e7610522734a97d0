// The [model] section of the run config: which BERT to train. No LibTorch.
#pragma once

#include <string>
#include <vector>

#include "launch/util/options.h"

namespace joule::models {

struct ModelOptions {
  static constexpr const char* kTable = "model";
  std::string config = "bert-large";  // preset name, config.json or HF model directory (its weights start the run)

  std::vector<OptionField> fields() { return {{"config", &config}}; }
  void validate() const {}
};

}  // namespace joule::models
