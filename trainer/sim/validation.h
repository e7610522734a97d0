// The cluster performance model checked against every published figure at hand (VALIDATION.md, generated from
// these cases and checked by a unit test): each case says whether it is a calibration (0 by construction), an
// independent prediction, or consistent by construction. No LibTorch.
#pragma once

#include <string>
#include <vector>

namespace joule::trainer {

struct ValidationCase {
  std::string name, unit, basis, source;
  double published = 0, predicted = 0;
  double relative_error() const { return (predicted - published) / published; }
};

// Every case, recomputed from the profiles and presets under `config_dir` (configs/).
std::vector<ValidationCase> validation_cases(const std::string& config_dir);
std::string validation_table(const std::vector<ValidationCase>& cases);  // the Markdown table of VALIDATION.md

}  // namespace joule::trainer
