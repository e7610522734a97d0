// `joule train`: the MPI-launched pretraining run, as a sequence of stages (docs/ARCHITECTURE.md):
//   resolve the run (trainer/run_setup.h) -> account for it (trainer/run_accounting.h) -> build the model,
//   reducer and optimizer and choose where to start -> the loop of TrainStep (trainer/train_step.h) and step
//   boundaries (trainer/step_boundary.h: metrics, eval, checkpoint policy) -> the final model directory and the
//   training-cost summary (trainer/summary_writer.h).
#pragma once

#include <string>

#include "trainer/checkpoint_policy.h"
#include "trainer/evaluator.h"
#include "trainer/run_config.h"

namespace joule::trainer {

// What `joule train` was asked: the run config (composed of every component's options section) and where to start.
struct TrainRequest {
  RunConfig config;
  std::string resume;               // "": start fresh (an existing checkpoint is an error); "auto"; or a checkpoint dir
  bool accept_data_change = false;  // a resume onto other data starts a new data segment instead of stopping
  std::string presets_dir;          // where model presets live (configs/models)
  std::string config_dir;           // configs/: hardware profiles and grid intensities
  // --data D without --eval-data (or --set data.eval): when D is a `joule data create` output with an eval/, that is
  // the held-out set, not the config's data.eval (which belongs to the config's data.train).
  bool eval_from_data_root = false;
};

// Runs the whole training on this rank; returns the process exit code (0, or kExitPreempted).
int train(const TrainRequest& request);

// `joule export`: a checkpoint directory, or a run directory's newest complete checkpoint, as an HF
// model directory. Returns the checkpoint used.
std::string export_checkpoint(const std::string& checkpoint_or_run, const std::string& out_dir);

}  // namespace joule::trainer
