// The run config of `joule train`: TOML with tables [train], [optimizer], [checkpoint], [eval], [data], [model],
// [run], [sim], [accounting], every key overridable from the command line (`--set optimizer.lr=6e-3`).
// Unknown keys, wrong types and impossible values are errors that list what is valid. No LibTorch.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "data/data_options.h"
#include "launch/util/options.h"
#include "launch/util/utf8.h"
#include "models/model_options.h"
#include "trainer/checkpoint_options.h"
#include "trainer/cost/accounting_options.h"
#include "trainer/eval_options.h"
#include "trainer/optimizer_options.h"
#include "trainer/sim/sim_options.h"
#include "trainer/train_options.h"

namespace joule::trainer {

// The run's config: the sections of the components it runs, composed. Each section (its keys, defaults, ranges and
// cross-key checks) belongs to the component that takes it; this is the one place that knows them all: the TOML key
// table, `--set`, the key listing in errors and the resolved config.toml are all made from the sections' field
// tables, in the order below.
struct RunConfig {
  TrainOptions train;                  // [train]       trainer/train_options.h
  OptimizerOptions optimizer;          // [optimizer]   trainer/optimizer_options.h
  CheckpointOptions checkpoint;        // [checkpoint]  trainer/checkpoint_options.h
  EvalOptions eval;                    // [eval]        trainer/eval_options.h
  data::DataOptions data;              // [data]        data/data_options.h
  models::ModelOptions model;          // [model]       models/model_options.h
  RunOptions run;                      // [run]         trainer/train_options.h
  sim::SimOptions sim;                 // [sim]         trainer/sim/sim_options.h
  cost::AccountingOptions accounting;  // [accounting]  trainer/cost/accounting_options.h

  static RunConfig from_toml_file(const std::string& path);
  static RunConfig from_toml_text(const std::string& text, const std::string& where);
  // "table.key=value", value parsed by the key's type; errors name the key and list valid ones, and `flag` ("--steps")
  // when the value came from a named flag rather than --set.
  void set(const std::string& assignment, const std::string& flag = "");
  // Every section's ranges and cross-key checks (none needs the world size or the data).
  void validate() const;
  std::string to_toml() const;  // the resolved config, every key
  // The same, with `comments` ("table.key" -> text) written after their keys as "  # text".
  std::string to_toml(const std::vector<std::pair<std::string, std::string>>& comments) const;
  static std::vector<std::string> keys();
  // A numeric key's range and what a special value means ("0: the region's"); nullopt for a key without one.
  static std::optional<std::pair<OptionRange, const char*>> key_range(const std::string& key);
};

// A value the run worked out for a key its config left automatic (train.threads = 0, train.precision = "auto",
// accounting.pue = 0, ...: the key's default), and where it came from. `value` is as --set takes it; "" when the run
// only says where the key's value came from (train.steps = 0: from train.target_sequences).
struct AutomaticValue {
  std::string key, value, source;
};
// `cfg` with each key that holds its automatic default set to the value the run used; keys the config set keep theirs.
RunConfig with_automatic_values(RunConfig cfg, const std::vector<AutomaticValue>& used);
// The config.toml a run writes: every key with the value the run used, each automatic one followed by
// "# auto: <source>". Given back to `joule train --config`, it repeats the run on the same machine kind and world.
std::string used_config_toml(const RunConfig& cfg, const std::vector<AutomaticValue>& used);

// One key whose value differs between a checkpoint's config and a resumed run's: the two values as config.toml writes
// them, whether the change leaves the run the one its earlier steps belong to (`safe`), and what it changes in words.
struct ConfigChange {
  std::string key, before, after;
  bool safe = true;
  std::string note;
};
// Every key that differs, in config.toml's order; paths compare as the files they name.
std::vector<ConfigChange> config_changes(const RunConfig& before, const RunConfig& after);

}  // namespace joule::trainer
