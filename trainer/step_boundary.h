// What the ranks agree on at the end of every step, in one named struct summed over ranks by a single
// all-reduce: the preemption and checkpoint decisions, the NaN/Inf skip (every rank must have skipped alike),
// the logging interval's training sums, an eval's sums, and every process's energy at a logging step. No LibTorch.
#pragma once

#include <type_traits>

#include "collectives/communicator.h"
#include "trainer/batch_sums.h"
#include "trainer/cost/energy.h"

namespace joule::trainer {

struct StepBoundary {
  double preempt = 0;         // ranks that received SIGTERM/SIGUSR1 (or a preempt fault) by now
  double checkpoint_due = 0;  // 1 on rank 0 when checkpoint.every_minutes has passed (rank 0's clock decides)
  double skipped = 0;         // ranks whose update was skipped for NaN/Inf gradients
  double sequences = 0;       // the sequences of this step's micro-batches (a packed row holds several)
  double loss = 0;            // this rank's step loss (mlm + nsp, its micro-batches' mean); 0 when skipped
  BatchSums interval;         // the logging interval's training sums (zeros unless the interval ends here)
  BatchSums eval;             // this step's eval sums (zeros unless eval ran)
  cost::EnergyTotals energy;  // the process's meters since start (zeros unless the interval ends here)

  // Sums every field over the ranks, in place, in one all-reduce that fails after `timeout_seconds`.
  void reduce(collectives::Communicator& comm, double timeout_seconds) {
    comm.all_reduce({this, sizeof(StepBoundary) / sizeof(double), collectives::DType::kFloat64},
                    {collectives::ReduceOp::kSum, timeout_seconds, "step-boundary values"})
        ->wait();
  }
};
// Every process's meters since start, summed over the ranks (collective): at checkpoints and at the end of a run.
inline cost::EnergyTotals reduce_energy(cost::EnergyTotals local, collectives::Communicator& comm,
                                        double timeout_seconds) {
  comm.all_reduce({local.joules.data(), local.joules.size(), collectives::DType::kFloat64},
                  {collectives::ReduceOp::kSum, timeout_seconds, "energy totals"})
      ->wait();
  return local;
}

// Reduced as an array of doubles: no padding, nothing but doubles.
static_assert(std::is_standard_layout_v<StepBoundary> && std::is_trivially_copyable_v<StepBoundary>);
static_assert(sizeof(StepBoundary) == sizeof(double) * (5 + 2 * 9 + cost::kComponents * cost::kSources));

}  // namespace joule::trainer
