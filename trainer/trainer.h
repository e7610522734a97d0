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
#include "trainer/train_request.h"

namespace joule::trainer {

// Runs the whole training on this rank; returns the process exit code (0, or kExitPreempted).
int train(const TrainRequest& request);

// `joule export`: a checkpoint directory, or a run directory's newest complete checkpoint, as an HF
// model directory. Returns the checkpoint used.
std::string export_checkpoint(const std::string& checkpoint_or_run, const std::string& out_dir);

}  // namespace joule::trainer
