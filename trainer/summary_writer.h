// The last stage of `joule train`: the training-cost summary of the whole run (every segment), written by rank 0 as
// RUN/summary.json, RUN/emissions.csv (CodeCarbon's columns) and the printed table. No LibTorch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "collectives/communicator.h"
#include "trainer/batch_sums.h"
#include "trainer/run_accounting.h"
#include "trainer/sim_clock.h"

namespace joule::trainer {

// What was trained and how it ended.
struct RunOutcome {
  int64_t steps = 0, sequences = 0, segments = 1, nonfinite_skipped = 0;
  double wall_s = 0;     // training wall time, all segments
  double seq_per_s = 0;  // measured after the warm-up steps
  bool preempted = false, reached_target = false;
  std::optional<EvalResult> eval;  // the last eval
  std::optional<cost::TargetAccuracy> target_accuracy;
  std::vector<std::string> data_notes;  // data segments after the first (trainer/data_record.h)
  // The workload.
  std::string model;  // model.config: a preset, config.json or model directory
  int64_t seq_len = 0, max_predictions = 0, global_batch = 0, target_sequences = 0;
  int64_t project_sequences = 0;  // a full pretraining's sequences, projected from the measured rates
  double flops_per_sequence = 0;
  int64_t pack = 0;               // the training data's packing (data/shard.h): sequences a row at most, 0 padded
  double packing_efficiency = 0;  // its real tokens of the rows' tokens
  std::string dtype = "fp32";
  nlohmann::json gemm;  // the GEMM paths (gemm_record), a CPU run's
  cost::MemoryFigures memory;
};

// Rank 0 only. `sim`: the simulated cluster's block, when the run has one.
void write_summary(const std::string& run_dir, const RunOutcome& outcome, const collectives::ProcessGroupInfo& info,
                   RunAccounting& accounting, const SimulatedClock* sim);

}  // namespace joule::trainer
