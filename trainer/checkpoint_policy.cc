#include "trainer/checkpoint_policy.h"

#include <atomic>
#include <csignal>

#include "launch/runtime.h"

namespace joule::trainer {
namespace {

std::atomic<int> g_signal{0};
extern "C" void on_preempt_signal(int sig) { g_signal.store(sig); }

}  // namespace

void CheckpointPolicy::install_signal_handlers() {
  std::signal(SIGTERM, on_preempt_signal);
  std::signal(SIGUSR1, on_preempt_signal);
}

CheckpointPolicy::CheckpointPolicy(const CheckpointOptions& options, bool root)
    : every_steps_(options.every_steps),
      every_minutes_(options.every_minutes),
      root_(root),
      last_save_(std::chrono::steady_clock::now()) {}

void CheckpointPolicy::vote(int64_t step, const FaultPoints& faults, StepBoundary& boundary) const {
  if (faults.preempts(step)) g_signal.store(SIGUSR1);
  boundary.preempt = g_signal.load() != 0 ? 1.0 : 0.0;
  boundary.checkpoint_due =
      root_ && every_minutes_ > 0 && launch::seconds_since(last_save_) >= every_minutes_ * 60 ? 1.0 : 0.0;
}

CheckpointPolicy::Decision CheckpointPolicy::decide(int64_t step, const StepBoundary& reduced) const {
  Decision d;
  d.preempted = reduced.preempt > 0;
  d.save = d.preempted || (every_steps_ > 0 && step % every_steps_ == 0) || reduced.checkpoint_due > 0;
  return d;
}

}  // namespace joule::trainer
