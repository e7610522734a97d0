// `joule summary RUN_DIR` and `joule report RUN_DIR`: the training-cost summary again from summary.json, and
// one self-contained HTML file with SVG charts (loss and masked-LM accuracy over sequences, throughput over
// time, energy by component and source, the projection's history, and this run's workload on each instance
// profile).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/bert_config.h"
#include "trainer/hardware.h"

namespace joule::tools {

// Prints the table and rewrites RUN_DIR/emissions.csv from RUN_DIR/summary.json; returns the table.
std::string run_summary(const std::string& run_dir);

// A compute-bound estimate of a workload on `nodes` instances of a profile: the profile's calibration gives
// its efficiency (MFU), the model's GEMM FLOPs per sequence give seq/s; no communication (the planner adds it).
struct ProfileEstimate {
  std::string instance;
  int nodes = 0;
  double mfu = 0, seq_per_s = 0, hours = 0, kwh = 0, usd = 0, co2_kg = 0;
  std::string basis;  // where the efficiency came from
};
ProfileEstimate estimate_on_profile(const trainer::InstanceProfile& profile, const models::BertConfig& model, int64_t seq_len,
                                    int64_t max_predictions, double sequences, int nodes, const std::string& dtype,
                                    double grid_g_per_kwh, const std::string& presets_dir);

// Writes the report; returns its path (RUN_DIR/report.html unless `out` is given).
std::string write_report(const std::string& run_dir, const std::string& out, const std::string& config_dir, int nodes);

}  // namespace joule::tools
