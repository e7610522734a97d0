// `joule plan --inference`: a fleet for an inference rate and a latency bound on every inference instance profile
// (configs/hardware/inference/) and on this host from `joule bench infer` results: per-instance throughput within
// the bound, instances needed with the headroom, USD per hour, and USD, kWh and CO2 per million inferences
// (trainer/sim/inference_sizing.h). Text, JSON or CSV.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace joule::tools {

struct InferencePlanOptions {
  std::string model = "layoutlm-base";  // a preset or a config.json
  int64_t seq_len = 128;
  double rate_per_hour = 1e6;
  double p99_ms = 0;  // 0: no bound
  double headroom = 0.2;
  std::vector<std::string> instances;  // inference profiles (names or files); empty: every one
  // `joule bench infer --json` outputs (or infer_compare.py's jsonl): FILE for this host's row (priced by cpu-host),
  // PROFILE=FILE for a measurement taken on an instance of that profile (added to its published figures).
  std::vector<std::string> measured;
  std::string region = "world";
  double grid_intensity = 0;
};

// "1000000/h", "1e6/h", "278/s", "16667/min": inferences per hour, from 1 to 1e12; a number without a unit is
// refused.
constexpr double kMinRatePerHour = 1, kMaxRatePerHour = 1e12;
double parse_rate_per_hour(const std::string& text);

std::string inference_plan_text(const InferencePlanOptions& options, const std::string& config_dir);
std::string inference_plan_json(const InferencePlanOptions& options, const std::string& config_dir);
std::string inference_plan_csv(const InferencePlanOptions& options, const std::string& config_dir);

}  // namespace joule::tools
