// The first stages of `joule train`, before anything is written: resolving the run (config -> data, vocabulary,
// model config, batch arithmetic, the resolved config and its hash), building what trains (model, reducer,
// optimizer), and choosing where to start (fresh, or the checkpoint to resume from).
#pragma once

#include <cstdint>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "collectives/communicator.h"
#include "collectives/reducer.h"
#include "data/dataset.h"
#include "launch/device.h"
#include "launch/runtime.h"
#include "models/bert.h"
#include "models/bert_config.h"
#include "models/precision.h"
#include "trainer/checkpoint.h"
#include "trainer/cost/accounting.h"
#include "trainer/fault.h"
#include "trainer/optimizer.h"
#include "trainer/run_config.h"

namespace joule::trainer {

// What every training process starts with, for `joule train` and `joule bench train` alike: the device checked
// (--device cuda on a build or node without CUDA stops before MPI starts), the communicator of its backend, this
// rank's device, and its intra-op threads (train.threads, else the node's cores / local ranks, with a warning when
// the ranks oversubscribe the cores).
struct TrainingProcess {
  std::unique_ptr<collectives::Communicator> comm;
  launch::DeviceChoice device;
  int threads = 1;
  std::string threads_source;  // where `threads` came from, when train.threads left it automatic
  launch::GemmPath gemm;       // measured and chosen on a CPU device (rank 0's fp32 choice on every rank)
};
TrainingProcess start_training_process(const TrainOptions& options);

struct ResolvedRun {
  RunConfig cfg;                      // seq_len and accumulation resolved
  models::BertConfig model_config;    // vocab_size from the shards' vocab.txt
  models::PrecisionChoice precision;  // train.precision resolved on this machine (part of config_hash)
  launch::DeviceChoice device;        // this rank's device (train.device)
  launch::GemmPath gemm;              // the process's GEMM paths (train.fp32_gemm resolved; part of config_hash)
  std::optional<data::Dataset> train_set, eval_set;
  int world = 1;
  OptimizerSharding shard = OptimizerSharding::none;  // optimizer.shard resolved (resolve_sharding)
  std::string shard_source;                           // why, when optimizer.shard is auto
  int64_t global_batch = 0, total_steps = 0;
  int64_t target_sequences = 0;  // the run's own target: train.target_sequences, else steps x global batch
  std::string resolved_toml, config_hash;
  // The values worked out for the keys the config left automatic (threads, precision, global batch, sharding,
  // vocabulary, price, PUE, grid intensity): RUN/config.toml holds them, and a resume compares configs with them filled
  // in.
  std::vector<AutomaticValue> used;
  const data::Dataset& dataset() const { return *train_set; }
};

// The batch arithmetic of a run on `world` ranks over `available` sequences (named `data_name` in errors): the
// accumulation follows train.global_batch when it is set; the steps follow train.target_sequences when train.steps is
// 0. RunConfigError naming the keys when the batch does not divide or exceeds the data.
struct BatchPlan {
  int64_t accumulation = 1, global_batch = 0, total_steps = 0;
  int64_t target_sequences = 0;  // train.target_sequences, else steps x global batch
};
// `sequences_per_row`: the data set's mean (packed rows hold several), for train.target_sequences' steps.
BatchPlan plan_batches(const TrainOptions& train, int world, int64_t available, const std::string& data_name,
                       double sequences_per_row = 1.0);

// Opens and validates the data (rank 0 first, so the others read its index cache), checks the config against
// the data and the world size. Collective. Throws RunConfigError naming the key. data.train = D, a `joule data
// create` output, means D/train, and D/eval is the held-out set when data.eval is not set, or when
// `eval_from_data_root` (the command line named D but not the held-out set: the config's data.eval belongs to the
// config's data.train).
// `cost`: what the run is billed as (its automatic price, PUE and grid intensity go into `used`).
ResolvedRun resolve_run(const RunConfig& validated, const std::string& presets_dir, const TrainingProcess& process,
                        const cost::CostSettings& cost, bool eval_from_data_root = false);

// The GEMM paths as summary.json and the bench record them: the fp32 path taken and why, each rate on one core with
// its share of the peak at the measured clock, and the start-up line.
nlohmann::json gemm_record(const launch::GemmPath& gemm);

// What a training run is built from: the one construction path of `joule train`, `joule bench train` and the tests.
struct TrainingSpec {
  models::BertConfig model;
  models::Precision precision = models::Precision::kFp32;
  launch::DeviceChoice device;
  uint64_t seed = 42;  // initial weights; dropout streams are seeded per rank from it
  std::string
      initial_weights;  // "": fresh weights; else a model.safetensors to start from (the optimizer starts fresh)
  OptimizerOptions optimizer;
  launch::Fp32Gemm fp32_gemm = launch::Fp32Gemm::kBlas;  // where fp32 Linear layers run their GEMMs
  collectives::ReducerOptions reducer;
  std::ostream* log = &std::cout;  // where rank 0 says where the initial weights come from (a bench: stderr)
};
// `joule train`'s: the resolved model, precision, device and seed, model.config's weights when it is a model
// directory, [optimizer] and the collective timeout.
TrainingSpec training_spec(const ResolvedRun& run);

// The model on the spec's device in training mode, the gradient reducer (its buckets there too) and the optimizer
// (its moments beside the parameters). The weights are this rank's own: a fresh run broadcasts rank 0's
// (start_state), a resumed one loads them.
struct TrainingStack {
  models::BertForPreTraining model{nullptr};
  std::unique_ptr<collectives::GradientReducer> reducer;
  std::unique_ptr<Optimizer> optimizer;
};
TrainingStack build_training(const TrainingSpec& spec, collectives::Communicator& comm);

// Where the run starts. `resume`: "" (fresh: a run directory that already holds checkpoints is an error),
// "auto" (the newest complete checkpoint that verifies; none at all: fresh), or a checkpoint directory.
struct StartPoint {
  std::optional<std::string> checkpoint;
  std::string manifest_checksum;      // of the checkpoint rank 0 verified: every rank loads exactly that one
  std::string fp32_gemm;              // where its fp32 GEMMs ran ("blas", "onednn", "cuda"; "blas" for older joules);
                                      // "" fresh, or trained in bf16 (no fp32 GEMMs)
  std::vector<std::string> warnings;  // checkpoints skipped by "auto" (rank 0)
};
// Rank 0's choice, verified (reads the checkpoint once): nothing for a fresh start, an error when a fresh start would
// overwrite checkpoints or when --resume names something that is not a checkpoint that verifies.
StartPoint choose_start_on_root(const std::string& run_dir, const std::string& resume);
// Collective. Rank 0 alone chooses (fresh, --resume auto: the newest checkpoint that verifies, or --resume DIR) and
// verifies the choice, reading it once; every rank gets its path and manifest checksum. A rank whose own listing
// of checkpoints/ differs (a shared file system lagging) says so and still loads rank 0's choice.
StartPoint choose_start(const std::string& run_dir, const std::string& resume, collectives::Communicator& comm,
                        const FaultPoints& faults);

// Collective, before build_training: an fp32 resume on a CPU with train.fp32_gemm = auto keeps the fp32 GEMM library
// its fp32 checkpoint ran (timing them again on a loaded host may choose the other, and the same products in another
// summation order are not the run it continues), where every rank can run it; `run`'s choice, config hash and
// automatic values follow (where a rank cannot, the reason says so and the resume warns of the change).
void keep_the_checkpoints_fp32_gemm(ResolvedRun& run, const StartPoint& start, collectives::Communicator& comm);

// Loads the chosen checkpoint into `objects` (or broadcasts rank 0's fresh weights) and returns the state the
// loop starts from. Collective.
// A resume also compares the data with what the checkpoint recorded (trainer/data_record.h): other data stops the
// run unless `accept_data_change`.
TrainerState start_state(const ResolvedRun& run, const StartPoint& start, TrainingStack& objects,
                         collectives::Communicator& comm, bool accept_data_change);

}  // namespace joule::trainer
