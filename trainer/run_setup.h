// The first stages of `joule train`, before anything is written: resolving the run (config -> data, vocabulary,
// model config, batch arithmetic, the resolved config and its hash), building what trains (model, reducer,
// optimizer), and choosing where to start (fresh, or the checkpoint to resume from).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/reducer.h"
#include "data/dataset.h"
#include "models/bert.h"
#include "models/bert_config.h"
#include "trainer/checkpoint.h"
#include "trainer/fault.h"
#include "trainer/optimizer.h"
#include "launch/device.h"
#include "models/precision.h"
#include "trainer/run_config.h"

namespace joule::trainer {

struct ResolvedRun {
  RunConfig cfg;  // seq_len and accumulation resolved
  models::BertConfig model_config;  // vocab_size from the shards' vocab.txt
  models::PrecisionChoice precision;  // train.precision resolved on this machine (part of config_hash)
  launch::DeviceChoice device;        // this rank's device (train.device)
  std::optional<data::Dataset> train_set, eval_set;
  int world = 1;
  int64_t global_batch = 0, total_steps = 0;
  int64_t target_sequences = 0;  // the run's own target: train.target_sequences, else steps x global batch
  std::string resolved_toml, config_hash;
  const data::Dataset& dataset() const { return *train_set; }
};

// Opens and validates the data (rank 0 first, so the others read its index cache), checks the config against
// the data and the world size. Collective. Throws RunConfigError naming the key.
ResolvedRun resolve_run(const RunConfig& validated, const std::string& presets_dir, collectives::Communicator& comm,
                        const launch::DeviceChoice& device);

// The model (its initial weights from model.config's directory when it is one) on the run's device, the gradient
// reducer (its buckets there too) and the optimizer (its moments beside the parameters), with dropout streams
// seeded per rank.
struct TrainingObjects {
  models::BertForPreTraining model{nullptr};
  std::unique_ptr<collectives::GradientReducer> reducer;
  std::unique_ptr<Optimizer> optimizer;
};
TrainingObjects build_training(const ResolvedRun& run, collectives::Communicator& comm);

// Where the run starts. `resume`: "" (fresh: a run directory that already holds checkpoints is an error),
// "auto" (the newest complete checkpoint that verifies; none at all: fresh), or a checkpoint directory.
struct StartPoint {
  std::optional<std::string> checkpoint;
  std::string manifest_checksum;      // of the checkpoint rank 0 verified: every rank loads exactly that one
  std::vector<std::string> warnings;  // checkpoints skipped by "auto" (rank 0)
};
// Collective. Rank 0 alone chooses (fresh, --resume auto: the newest checkpoint that verifies, or --resume DIR) and
// verifies the choice, reading it once; every rank gets its path and manifest checksum. A rank whose own listing
// of checkpoints/ differs (a shared file system lagging) says so and still loads rank 0's choice.
StartPoint choose_start(const std::string& run_dir, const std::string& resume, collectives::Communicator& comm, const FaultPoints& faults);

// Loads the chosen checkpoint into `objects` (or broadcasts rank 0's fresh weights) and returns the state the
// loop starts from. Collective.
TrainerState start_state(const ResolvedRun& run, const StartPoint& start, TrainingObjects& objects, collectives::Communicator& comm);

}  // namespace joule::trainer
