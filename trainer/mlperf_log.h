// An MLPerf-style log of a run (RUN/mllog.txt): `:::MLLOG {json}` lines with the keys MLPerf training's BERT
// reference logs, so that the `mlperf-logging` package's compliance checker and tools that parse such logs read a
// joule run. A run is not an MLPerf submission: the submission_* keys say what it is (division "open", status
// "research", the org is the accounting project name, the platform the instances), and a closed-division check of
// the target accuracy (0.720) does not apply. Layout:
//   a fresh run: submission_*, cache_clear, init_start, the hyper-parameters (global_batch_size, opt_*, seed,
//                gradient_accumulation_steps, max_sequence_length, train_samples, eval_samples), init_stop,
//                run_start, block_start;
//   each eval:   block_stop, eval_start, eval_accuracy (masked-LM accuracy), eval_stop, block_start;
//   the end:     block_stop, run_stop {status: success, or aborted when eval.target_mlm_accuracy was not reached}. A
//   resumed segment appends to the same file and writes no
//                second init, run_start or block_start; a preempted one writes no run_stop (the run goes on). A
//                resume first drops what it trains again: lines past its checkpoint's samples (a crash after the
//                checkpoint) and a finished run's closing block_stop and run_stop (--steps raised), so the log has
//                one run_stop and no sample counted twice.
// Rank 0 writes, one line at a time. No LibTorch.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "launch/util/file_io.h"

namespace joule::trainer {

// What the start of the log records.
struct MlperfRunFacts {
  std::string org, platform;
  int64_t global_batch = 0, accumulation = 1, total_steps = 0, warmup_steps = 0, seed = 0, seq_len = 0;
  int64_t train_samples = 0, eval_samples = 0;
  std::string optimizer;  // "lamb" or "adamw"
  double lr = 0, beta1 = 0, beta2 = 0, eps = 0, weight_decay = 0;
  double init_start_ms = 0;  // when the process began initializing (epoch milliseconds)
};

class MlperfLog {
 public:
  MlperfLog() = default;
  // Appends; the file is made when missing. `resume_samples` >= 0: a resumed segment from a checkpoint at that many
  // samples (the lines it trains again are dropped first; dropped_lines() says how many).
  explicit MlperfLog(const std::string& path, int64_t resume_samples = -1);
  bool is_open() const { return file_.is_open(); }
  int64_t dropped_lines() const { return dropped_lines_; }

  // A fresh run's head, up to run_start and the first block_start. A resumed segment writes nothing at its start:
  // the block the run was in when it stopped goes on.
  void start(const MlperfRunFacts& facts);
  void eval(int64_t samples, double mlm_accuracy);
  // block_stop and run_stop {status}: "success", or "aborted" (a target accuracy set and not reached).
  void finish(int64_t samples, const std::string& status = "success");

  // One `:::MLLOG` line (exposed for tests): event_type INTERVAL_START for *_start keys, INTERVAL_END for *_stop,
  // POINT_IN_TIME otherwise.
  static std::string line(const std::string& key, const nlohmann::json& value, const nlohmann::json& metadata,
                          double time_ms);

 private:
  void log(const std::string& key, const nlohmann::json& value = nullptr,
           const nlohmann::json& metadata = nlohmann::json::object(), double time_ms = 0);
  LineLog file_;
  int64_t dropped_lines_ = 0;
};

double epoch_ms();  // now, in milliseconds since the epoch

}  // namespace joule::trainer
