// What `joule train` was asked (trainer.h runs it): no LibTorch, so that the joule front reads a command line into it,
// and refuses a bad one, before it executes the engine (tools/cli/engine_args.h).
#pragma once

#include <string>

#include "trainer/run_config.h"

namespace joule::trainer {

// The run config (composed of every component's options section) and where to start.
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

}  // namespace joule::trainer
