// Checkpoints: RUN/checkpoints/step_NNNNNNNN/ holding model.safetensors (HF names), optimizer.safetensors
// (moments), rng_rank_R.bin (each rank's generator state), trainer_state.json, and manifest.json (format
// version, config hash, world size, every file's size and FNV-1a-64 checksum). Written into a
// temporary directory, fsynced, renamed, then marked COMPLETE; the oldest beyond `keep` are removed.
// Resume takes the newest complete checkpoint whose manifest verifies, skipping others with a warning.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "collectives/communicator.h"
#include "data/shuffle.h"
#include "launch/util/error.h"
#include "models/bert.h"
#include "trainer/optimizer.h"

namespace joule::trainer {

// 2: the optimizer state may be in one file per rank (optimizer.shard = zero1), listed under the manifest's
// "optimizer"; an unsharded checkpoint is still written as version 1, which older joules read.
inline constexpr int kCheckpointFormatVersion = 2;

struct TrainerState {
  int64_t step = 0;            // optimizer steps done
  data::SamplerState sampler;  // where the data stands after `step`
  int64_t sequences = 0;       // sequences trained on, all ranks
  double wall_seconds = 0;     // training wall time so far, all segments
  int64_t segments = 1;        // runs that contributed (1 + resumes)
  int world_size = 1;
  std::string config_hash;
  std::string config_toml;        // the resolved config.toml it was trained with; "" from older joules
  std::string used_config_toml;   // the same with its automatic keys as they resolved (RUN/config.toml); "" older
  std::string compute_precision;  // what train.precision resolved to ("bf16", "fp32"); "" from older joules
  std::string fp32_gemm;    // where fp32 Linear layers ran: "blas", "onednn" (CPU), "cuda"; "" older joules (blas)
  std::string ledger_json;  // the accounting ledger (energy, cost, segments), JSON; "" before the first save
  std::string data_json;    // the data segments the run trained on (trainer/data_record.h); "" from older joules
  std::string target_json;  // eval.target_mlm_accuracy's outcome at the last eval (cost::TargetAccuracy); "" none
  int64_t nonfinite_skipped = 0;  // steps whose update was skipped for NaN/Inf gradients, all segments
  int64_t nonfinite_streak = 0;   // of those, how many in a row up to `step`
};

class CheckpointError : public joule::Error {
 public:
  explicit CheckpointError(const std::string& message,
                           std::string hint =
                               "resume from another checkpoint with --resume DIR (--resume auto takes the newest that "
                               "verifies), or start a new --run-dir")
      : joule::Error(message, std::move(hint)) {}
};

// Fault injection into a checkpoint write (trainer/fault.h): `after_stage` is called after each stage: "rng",
// "model", "optimizer", "state", "manifest", "renamed"; `fail_fsync` makes every fsync fail with EIO.
struct CheckpointFaults {
  std::function<void(const std::string& stage)> after_stage;
  bool fail_fsync = false;
};

// The bytes of one checkpoint of a model with `parameters` parameters: its weights and LAMB's two moments in fp32,
// plus 1 MiB for the rest (generator states, JSON files).
double checkpoint_bytes(double parameters);

// How long a rank waits for the others' part of a checkpoint of `bytes` (their writes, rank 0's hashing of every
// file): the run's collective timeout plus the bytes at 10 MB/s, slower than any disk or shared file system a
// cluster writes to. A slow disk is then not a fault, and a dead link during a checkpoint ends the job about as soon as
// one during a step.
double checkpoint_wait_seconds(double collective_timeout_seconds, double bytes);

// Collective: every rank calls it. Returns the checkpoint directory. Every write and fsync is checked: a failure
// is a CheckpointError naming the file and the cause (ENOSPC, EROFS, EIO), and the directory is never marked
// COMPLETE. Keeps the newest `keep` checkpoints with joule's own names (step_NNNNNNNN); other directories are
// left alone. Its waits for other ranks end at checkpoint_wait_seconds(collective_timeout_seconds, ...) with a
// CollectiveTimeout naming the checkpoint and the stage.
std::string save_checkpoint(const std::string& root, const models::BertForPreTraining& model,
                            const Optimizer& optimizer, const TrainerState& state, collectives::Communicator& comm,
                            int64_t keep, double collective_timeout_seconds, const CheckpointFaults& faults = {});

// The checkpoints under `root` with joule's names (step_ and digits, or that with .tmp while being written), newest
// first; complete or not.
std::vector<std::string> list_checkpoints(const std::string& root);

// Reads every file of `dir` against its manifest: "" when the checkpoint is complete and intact, else what is wrong.
std::string verify_checkpoint(const std::string& dir);

// The newest complete, verified checkpoint under `root`, or nothing. Problems with newer ones are
// appended to `warnings`.
std::optional<std::string> find_latest_checkpoint(const std::string& root, std::vector<std::string>* warnings);

// The FNV-1a-64 of `dir`/manifest.json: what identifies a verified checkpoint across ranks.
std::string manifest_checksum(const std::string& dir);

// `dir`/trainer_state.json alone (no weights, no optimizer state): what a resume needs to know before it builds the
// model. Throws CheckpointError naming the file and key.
TrainerState read_checkpoint_state(const std::string& dir);

// Loads weights, optimizer state and this rank's generator state (when the world size matches; otherwise ranks
// keep their fresh seeds). `verified_manifest`: the manifest checksum of the checkpoint rank 0 chose and verified;
// this rank then checks only that it sees the same manifest and file sizes (no second read of the data). Empty:
// verifies every file here. Throws CheckpointError naming the file.
TrainerState load_checkpoint(const std::string& dir, models::BertForPreTraining& model, Optimizer& optimizer, int rank,
                             int world_size, const std::string& verified_manifest = "");

}  // namespace joule::trainer
