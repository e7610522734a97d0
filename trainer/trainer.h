// `joule train`: the MPI-launched pretraining loop. Data (global shuffle, prefetching loader) ->
// BertForPreTraining -> bucketed gradient all-reduce overlapped with backward -> LAMB/AdamW with
// NVIDIA's schedule; metrics (JSON Lines), eval, atomic checkpoints with bit-exact resume, preemption
// on SIGTERM/SIGUSR1, final HF model directory and the training-cost summary.
#pragma once

#include <string>

#include "trainer/run_config.h"

namespace joule::trainer {

// Exit code after a checkpoint taken on SIGTERM/SIGUSR1 (EX_TEMPFAIL: requeue and --resume auto).
inline constexpr int kExitPreempted = 75;

struct TrainOptions {
  RunConfig config;
  std::string resume;       // "": start fresh (an existing checkpoint is an error); "auto"; or a checkpoint dir
  std::string presets_dir;  // where model presets live (configs/models)
  std::string config_dir;   // configs/: hardware profiles and grid intensities
};

// Runs the whole training on this rank; returns the process exit code.
int train(const TrainOptions& options);

struct EvalResult {
  double mlm_loss = 0, nsp_loss = 0, loss = 0, mlm_accuracy = 0, nsp_accuracy = 0;
  int64_t sequences = 0;
  std::string to_json() const;
};

// `joule eval`: dropout off, one process. `max_batches` 0: the whole dataset.
EvalResult evaluate_model_dir(const std::string& model_dir, const std::string& data, int64_t batch, int64_t max_batches);

// `joule export`: a checkpoint directory, or a run directory's newest complete checkpoint, as an HF
// model directory. Returns the checkpoint used.
std::string export_checkpoint(const std::string& checkpoint_or_run, const std::string& out_dir);

}  // namespace joule::trainer
