// The metrics stage of `joule train`: steps are gathered into logging intervals (their timings here; their losses and
// accuracies in the training loop's DeviceSums, read once per interval and reduced over ranks); at the end of each
// interval rank 0 writes one JSON object to RUN/metrics.jsonl (and the scalars people watch to TensorBoard's RUN/tb/)
// (loss, accuracy, lr, throughput, MFU, time split, power, energy, cost, CO2, the projection, the simulated clock),
// rewrites the Prometheus textfile when one is configured, and prints a line (or, on a terminal, keeps a live status
// line between intervals). Eval results go to the same file. No LibTorch.
#pragma once

#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>

#include "launch/util/file_io.h"
#include "trainer/batch_sums.h"
#include "trainer/run_accounting.h"
#include "trainer/sim_clock.h"
#include "trainer/step_boundary.h"
#include "trainer/tensorboard.h"

namespace joule::trainer {

// What one step did, as the logger sees it.
struct StepRecord {
  int64_t step = 0;            // optimizer steps done, this one included
  int64_t sequences = 0;       // sequences trained on, all ranks, this step included
  int64_t step_sequences = 0;  // sequences this step trained on, all ranks (global_batch unless packed)
  int64_t nonfinite_skipped = 0;
  bool skipped = false;  // NaN/Inf: the update was not applied
  double lr = 0, grad_norm = 0;
  double loss = 0;  // the step's training loss (mlm + nsp), this rank's until the step boundary averages the ranks'
  double seconds = 0, comm_seconds = 0, exposed_comm_seconds = 0, data_wait_seconds = 0;
  double comm_bytes = 0;  // this rank's gradient buckets (all-reduced, or reduce-scattered) and gathered weights
};

struct MetricsSettings {
  int64_t log_every_steps = 10, throughput_warmup_steps = 2, total_steps = 0, global_batch = 0, seq_len = 0;
  int64_t target_sequences = 0;
  double sequences_per_row = 1;  // the training data's mean: rows hold several sequences when packed
  double project_after_fraction = 0.05;
  std::string prometheus_file;
  std::string precision = "fp32";  // the compute precision, named in every line (MFU is against its peak)
  bool interactive = false;        // a live status line on a terminal
  // Where this segment starts, and what earlier segments (a resumed run's) trained and timed: the run's throughput
  // is every segment's timed sequences over their timed seconds, each segment's own warm-up steps left out.
  int64_t start_step = 0;
  double wall_before = 0;  // training wall time of earlier segments
  int64_t timed_sequences_before = 0;
  double timed_s_before = 0;
};

class MetricsLogger {
 public:
  // Rank 0 appends to `run_dir`/metrics.jsonl.
  MetricsLogger(const MetricsSettings& settings, const std::string& run_dir, bool root);

  void record_step(const StepRecord& r);
  bool interval_ends(int64_t step) const { return step % s_.log_every_steps == 0 || step == s_.total_steps; }
  // Ends the interval with the values reduced over ranks: brings the ledger's segment up to date (every rank),
  // and on rank 0 writes the row, the Prometheus file and the printed line.
  void write_interval(const StepBoundary& reduced, RunAccounting& accounting, const SimulatedClock* sim);
  // An eval after `step`, when the run had trained on `sequences` (every rank's).
  void write_eval(int64_t step, int64_t sequences, const EvalResult& eval);

  // Sequences per second over every segment's steps after its warm-up; `fallback` when none was timed.
  double seq_per_s(double fallback) const;
  double remaining_sequences(int64_t step) const;  // after `step`, to the run's last
  // This segment's timed steps into the ledger (write_interval does it; the end of the run too).
  void record_timing(RunAccounting& accounting) const;
  double wall_s() const;  // all segments

 private:
  MetricsSettings s_;
  bool root_;
  LineLog file_;       // RUN/metrics.jsonl on rank 0: every line checked
  TensorBoardLog tb_;  // RUN/tb/ on rank 0: the same figures as TensorBoard scalars
  std::chrono::steady_clock::time_point start_;
  StepRecord last_;
  double interval_step_s_ = 0, interval_comm_s_ = 0, interval_exposed_s_ = 0, interval_wait_s_ = 0;
  double interval_comm_bytes_ = 0;
  int64_t interval_steps_ = 0, interval_sequences_ = 0, timed_sequences_ = 0;  // this segment's
  double timed_seconds_ = 0;
};

}  // namespace joule::trainer
