// The [accounting] section of the run config: what a run is billed as (instance profile, price, PUE, grid carbon
// intensity; configs/hardware/*.toml, configs/grid-intensity.toml), its energy meters, the projection to a full
// pretraining's run and the CodeCarbon/Prometheus outputs. Owned by the cost library. No LibTorch.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "launch/util/options.h"

namespace joule::cost {

struct AccountingOptions {
  static constexpr const char* kTable = "accounting";
  std::string instance = "auto";  // instance profile billed per node; auto: cpu-host for --device cpu
  double price_per_hour = -1;     // USD per instance-hour; < 0: the profile's
  double pue = 0;                 // 0: the profile's
  std::string region = "world";   // grid carbon intensity region
  double grid_intensity = 0;      // g CO2/kWh; 0: the region's
  std::string meters = "auto";    // auto, or a list of rapl, nvml, neuron, model
  double meter_sample_seconds = 1.0;
  int64_t project_sequences = 450000000;  // a full pretraining, projected from measured rates
  double project_after_fraction = 0.05;   // projections start after this fraction of the run's target
  std::string project_name = "joule";     // emissions.csv project_name
  std::string prometheus_file;            // "": none; else rewritten each interval (textfile collector)

  std::vector<OptionField> fields() {
    return {{"instance", &instance},
            // Ranges that keep every figure a run reports finite (a PUE of 1e308 made its CO2 4.9e62 kg, then null).
            {"price_per_hour", &price_per_hour, OptionRange{-1e6, 1e6}, "negative: the instance profile's"},
            {"pue", &pue, OptionRange{0, 10}, "0: the instance profile's"},
            {"region", &region},
            {"grid_intensity", &grid_intensity, OptionRange{0, 5000}, "0: the region's"},
            {"meters", &meters},
            {"meter_sample_seconds", &meter_sample_seconds, OptionRange{0, 60, true, false}},
            {"project_sequences", &project_sequences, OptionRange{1, 1e15}},
            {"project_after_fraction", &project_after_fraction, OptionRange{0, 1, false, true}},
            {"project_name", &project_name},
            {"prometheus_file", &prometheus_file}};
  }
  void validate() const {
    check_section_ranges(*this);
    if (!std::isfinite(pue) || (pue != 0 && pue < 1))
      throw RunConfigError("run config: accounting.pue must be >= 1 (or 0: the instance profile's)");
  }
};

}  // namespace joule::cost
