// The run config of `joule train`: TOML with tables [train], [optimizer], [checkpoint], [eval],
// [data], [model], every key overridable from the command line (`--set optimizer.lr=6e-3`).
// Unknown keys, wrong types and impossible values are errors that list what is valid. No LibTorch.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "launch/error.h"

namespace joule::trainer {

class RunConfigError : public joule::Error {
 public:
  explicit RunConfigError(const std::string& message, std::string hint = "fix that key in the config file or the --set/flag that gives it (joule train --help lists the flags)")
      : joule::Error(message, std::move(hint), ErrorKind::usage) {}
};

// Where `text` first stops being valid UTF-8 ("line L, byte B (0xXX): not valid UTF-8"), or "". Every TOML
// file joule reads is checked before toml11 parses it: Debian's toml11 3.7.1 reads past its buffer on
// invalid UTF-8 inside a literal string (found by tests/fuzz/fuzz_run_config).
std::string utf8_problem(const std::string& text);

struct RunConfig {
  // [train]
  int64_t steps = 0;              // optimizer steps; 0: derived from target_sequences
  int64_t target_sequences = 0;   // sequences to train on (450e6 for the card's run)
  int64_t micro_batch = 8;        // sequences per rank per forward/backward
  int64_t accumulation = 1;       // micro-batches per rank per optimizer step
  int64_t global_batch = 0;       // 0: micro_batch x accumulation x world size; else accumulation follows
  int64_t seq_len = 0;            // 0: the shards' sequence length (must match when set)
  int64_t threads = 0;            // intra-op threads per rank; 0: cores / local ranks
  int64_t seed = 42;
  int64_t log_every_steps = 10;
  int64_t throughput_warmup_steps = 2;  // excluded from the throughput figures
  int64_t max_nonfinite_steps = 10;      // consecutive steps with NaN/Inf gradients (each skipped) before the run stops
  double collective_timeout_seconds = 600;  // a collective not done by then fails and aborts the job (a dead or stalled rank)
  std::string precision = "auto";  // auto | fp32 | bf16: bf16 mixed precision where matmuls run it natively (models/precision.h)
  std::string device = "cpu";     // cpu | cuda (one GPU per rank) | trainium-sim (CPU numerics + [sim]'s cluster's clock)
  // "auto": a live status line when a single process writes to a terminal, else a plain line per
  // interval (under mpirun every rank gets a pseudo-terminal, so it cannot tell); "bar"; "lines".
  std::string progress = "auto";
  // [optimizer]
  std::string optimizer = "lamb";
  double lr = 6e-3;
  double warmup_fraction = 0.2843;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-6, weight_decay = 0.01, max_grad_norm = 1.0;
  // [checkpoint]
  int64_t checkpoint_every_steps = 0;
  double checkpoint_every_minutes = 0;
  int64_t checkpoint_keep = 3;
  // [eval]
  int64_t eval_every_steps = 0;
  double eval_target_mlm_accuracy = 0;  // > 0: stop once reached (time-to-accuracy)
  int64_t eval_batch = 32;
  int64_t eval_max_batches = 50;
  // [data]
  std::string train_data;  // shard directory, glob or list
  std::string eval_data;   // "" : no eval
  std::string vocab;       // "" : vocab.txt beside the shards
  // [model]
  std::string model = "bert-large";  // preset name, config.json or HF model directory
  // [run]
  std::string run_dir = "runs/run";
  // [sim] (--device trainium-sim): the cluster whose clock the run advances
  std::string sim_instance = "trn1.32xlarge";
  int64_t sim_nodes = 16;
  // [accounting] (configs/hardware/*.toml, configs/grid-intensity.toml)
  std::string instance = "auto";      // instance profile billed per node; auto: cpu-host for --device cpu
  double price_per_hour = -1;         // USD per instance-hour; < 0: the profile's
  double pue = 0;                     // 0: the profile's
  std::string region = "world";       // grid carbon intensity region
  double grid_intensity = 0;          // g CO2/kWh; 0: the region's
  std::string meters = "auto";        // auto, or a list of rapl, nvml, neuron, model
  double meter_sample_seconds = 1.0;
  int64_t project_sequences = 450000000;  // the card's run, projected from measured rates
  double project_after_fraction = 0.05;   // projections start after this fraction of the run's target
  std::string project_name = "joule";     // emissions.csv project_name
  std::string prometheus_file;            // "": none; else rewritten each interval (textfile collector)

  static RunConfig from_toml_file(const std::string& path);
  static RunConfig from_toml_text(const std::string& text, const std::string& where);
  // "table.key=value", value parsed by the key's type; errors name the key and list valid ones.
  void set(const std::string& assignment);
  // Cross-key checks that do not need the world size or the data.
  void validate() const;
  std::string to_toml() const;  // the resolved config, every key
  static std::vector<std::string> keys();
};

}  // namespace joule::trainer
