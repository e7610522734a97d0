// Fault injection for reliability tests (developers only; see tests/e2e/faults.sh). Read once from
// the environment variable JOULE_FAULT, a list of faults separated by ';', each "kind:key=value,...":
//
//   kill:rank=R,step=N                      SIGKILL to rank R once step N's update is done (before its checkpoint)
//   kill-in-checkpoint:rank=0,step=N,stage=S  SIGKILL inside step N's checkpoint write, right after stage S:
//                                           rng | model | optimizer | state | manifest | renamed (before COMPLETE);
//                                           rng is every rank's stage, the others rank 0's alone (so rank=0 there)
//   stall:rank=R,step=N,seconds=S           rank R sleeps S seconds (default 3600) before step N's forward pass,
//                                           so the other ranks' first collective of the step times out; with
//                                           stage=S (as kill-in-checkpoint's) inside step N's checkpoint write
//                                           instead, so the other ranks' wait for the checkpoint times out
//   nan:rank=R,step=N,count=K               rank R's loss is multiplied by NaN in steps N .. N+K-1 (default K 1),
//                                           so the reduced gradients are NaN on every rank
//   preempt:rank=R,step=N                   rank R behaves as if sent SIGUSR1 during step N
//   corrupt-shard:rank=R,step=N             after step N, rank R overwrites every training shard with bytes that
//                                           are not HDF5 (same size) and makes its loader reopen them
//   fail-fsync:rank=0,step=N                every fsync of step N's checkpoint write fails with EIO on rank R
//   stale-checkpoint-view:rank=R            on resume, rank R's listing of checkpoints/ lacks the newest one (a shared
//                                           file system whose directory listing lags); takes no step
//
// rank defaults to 0; step counts optimizer steps from 1. A malformed JOULE_FAULT is an error at start-up, as is a
// rank outside the run (once the world size is known).
//
// Only a test binary acts on JOULE_FAULT: `joule-fault-injection` (tests/CMakeLists.txt), the joule command built with
// JOULE_FAULT_INJECTION, whose main calls enable_fault_injection(). The joule binary users run ignores the variable
// and says so on stderr: a stray JOULE_FAULT=corrupt-shard must never overwrite someone's shards.
// No LibTorch here.
#pragma once

#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "launch/util/error.h"

namespace joule::trainer {

enum class FaultKind {
  kill,
  kill_in_checkpoint,
  stall,
  nan,
  preempt,
  corrupt_shard,
  fail_fsync,
  stale_checkpoint_view
};
// As spelled in JOULE_FAULT: "kill", "kill-in-checkpoint", "stall", "nan", "preempt", "corrupt-shard", "fail-fsync",
// "stale-checkpoint-view".
const char* fault_kind_name(FaultKind kind);

struct Fault {
  FaultKind kind = FaultKind::kill;
  int rank = 0;
  int64_t step = 0;       // >= 1
  int64_t count = 1;      // consecutive steps (only nan takes count=)
  double seconds = 3600;  // stall
  std::string stage;      // kill-in-checkpoint (default "model"); stall inside a checkpoint ("" before the step)
  std::string text;       // as written in JOULE_FAULT, for errors
};

class FaultError : public joule::Error {
 public:
  explicit FaultError(const std::string& message,
                      std::string hint = "fix JOULE_FAULT (see trainer/fault.h) or unset it")
      : joule::Error(message, std::move(hint), ErrorKind::usage) {}
};

class FaultPlan {
 public:
  // Parses a JOULE_FAULT value ("" : no faults). Throws FaultError naming the fault and the bad part.
  static FaultPlan parse(const std::string& spec);
  // JOULE_FAULT's faults where fault injection is enabled (the test binary); else none, with a note on stderr when
  // the variable is set.
  static FaultPlan from_environment();

  // Throws FaultError naming a fault whose rank is not one of the run's `world_size` ranks: it would never act, and
  // the test relying on it would pass for the wrong reason. Every rank calls it once the world size is known.
  void check_ranks(int world_size) const;

  bool empty() const { return faults_.empty(); }
  const std::vector<Fault>& faults() const { return faults_; }
  // The fault of `kind` for this rank that fires at `step` (any step of its count), or nullptr.
  const Fault* at(FaultKind kind, int rank, int64_t step) const;

 private:
  std::vector<Fault> faults_;
};

// Called by the test binary's main only (JOULE_FAULT_INJECTION): from then on from_environment() reads JOULE_FAULT.
void enable_fault_injection();
bool fault_injection_enabled();

// The points in a training step where faults fire, for one rank. The trainer calls each at its named place;
// with no faults armed every call is a no-op.
class FaultPoints {
 public:
  FaultPoints(FaultPlan plan, int rank) : plan_(std::move(plan)), rank_(rank) {}
  // Writes a line naming this rank's armed faults to stderr (rank-prefixed), so that a test log shows them.
  void announce() const;
  // Before step `step`'s forward pass: stall without a stage (sleeps).
  void before_step(int64_t step) const;
  // Whether step `step`'s loss is to be multiplied by NaN.
  bool poisons_loss(int64_t step) const { return plan_.at(FaultKind::nan, rank_, step) != nullptr; }
  // After step `step`'s update: kill (never returns), corrupt-shard (calls `corrupt_shards`).
  void after_update(int64_t step, const std::function<void()>& corrupt_shards) const;
  // Whether this rank behaves as if sent SIGUSR1 during step `step`.
  bool preempts(int64_t step) const { return plan_.at(FaultKind::preempt, rank_, step) != nullptr; }
  // Inside step `step`'s checkpoint write, after `stage`: kill-in-checkpoint (never returns when it fires), stall with
  // that stage (sleeps).
  void checkpoint_stage(int64_t step, const std::string& stage) const;
  // Whether the fsyncs of step `step`'s checkpoint write are to fail (EIO).
  bool fails_fsync(int64_t step) const { return plan_.at(FaultKind::fail_fsync, rank_, step) != nullptr; }
  // Whether this rank's listing of the checkpoint directory is to lack the newest entry.
  bool stale_checkpoint_view() const { return plan_.at(FaultKind::stale_checkpoint_view, rank_, 1) != nullptr; }

 private:
  FaultPlan plan_;
  int rank_;
};

// Sends SIGKILL to this process after a one-line notice on stderr (what a crash of the node looks like).
[[noreturn]] void kill_self(const std::string& why);

// Overwrites `path` in place with the same number of bytes that are not an HDF5 file (a corrupt shard).
void corrupt_file(const std::string& path);

}  // namespace joule::trainer
