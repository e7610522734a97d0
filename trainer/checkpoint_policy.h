// When `joule train` saves a checkpoint: every checkpoint.every_steps, every checkpoint.every_minutes (rank 0's
// clock decides, so every rank saves together), and on SIGTERM/SIGUSR1 at the next step boundary, after which
// the process exits with kExitPreempted (75) for the scheduler to requeue. The ranks vote in the step boundary
// (trainer/step_boundary.h): one rank's signal is enough. No LibTorch.
#pragma once

#include <chrono>
#include <cstdint>

#include "trainer/checkpoint_options.h"
#include "trainer/fault.h"
#include "trainer/step_boundary.h"

namespace joule::trainer {

// Exit code after a checkpoint taken on SIGTERM/SIGUSR1 (EX_TEMPFAIL: requeue and --resume auto).
inline constexpr int kExitPreempted = 75;

class CheckpointPolicy {
 public:
  // First thing in `train`: a preemption signal during start-up (MPI init, reading shards) is not fatal; it is
  // acted on at the first step boundary.
  static void install_signal_handlers();

  CheckpointPolicy(const CheckpointOptions& options, bool root);
  // This rank's votes for the boundary after `step`: a signal received (or a preempt fault), and on rank 0
  // whether the minutes have passed.
  void vote(int64_t step, const FaultPoints& faults, StepBoundary& boundary) const;

  struct Decision {
    bool save = false;
    bool preempted = false;  // save, then exit with kExitPreempted
  };
  Decision decide(int64_t step, const StepBoundary& reduced) const;
  void saved() { last_save_ = std::chrono::steady_clock::now(); }

 private:
  int64_t every_steps_;
  double every_minutes_;
  bool root_;
  std::chrono::steady_clock::time_point last_save_;
};

}  // namespace joule::trainer
