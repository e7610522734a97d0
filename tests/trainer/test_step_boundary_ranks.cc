// The step boundary at 2 and 4 ranks (joule_mpi_tests): every field of StepBoundary is summed over the ranks by its one
// all-reduce, and every rank reads the same values. Expected values are closed forms in the rank and world size.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "collectives/communicator.h"
#include "trainer/step_boundary.h"

using joule::cost::Component;
using joule::cost::EnergyTotals;
using joule::cost::Source;
using joule::trainer::StepBoundary;

namespace {

joule::collectives::Communicator& boundary_comm() {
  static std::unique_ptr<joule::collectives::Communicator> c = joule::collectives::create_communicator("mpi");
  return *c;
}

}  // namespace

TEST(StepBoundary, SumsEveryFieldOverTheRanks) {
  auto& comm = boundary_comm();
  const int r = comm.info().rank, n = comm.info().world_size;
  const double tri = n * (n - 1) / 2.0;  // the sum of the ranks
  StepBoundary b;
  b.preempt = r == n - 1 ? 1 : 0;  // one rank got the signal
  b.checkpoint_due = r == 0 ? 1 : 0;
  b.skipped = 1;  // every rank skipped alike
  b.interval = {1.0 * r, 2.0 * r, 3.0 * r, 4.0 * r, 5.0 * r, 6.0 * r, 1, 7.0 * r, 1};
  b.eval = {r + 0.5, 0, 0, 0, 0, 8, 1};
  b.energy.at(Component::cpu, Source::rapl) = 10.0 * r;
  b.energy.at(Component::gpu, Source::nvml) = 1;
  b.reduce(comm, 60);
  EXPECT_EQ(b.preempt, 1);
  EXPECT_EQ(b.checkpoint_due, 1);
  EXPECT_EQ(b.skipped, n);
  EXPECT_EQ(b.interval.mlm_loss, tri);
  EXPECT_EQ(b.interval.nsp_loss, 2 * tri);
  EXPECT_EQ(b.interval.mlm_correct, 3 * tri);
  EXPECT_EQ(b.interval.mlm_predictions, 4 * tri);
  EXPECT_EQ(b.interval.nsp_correct, 5 * tri);
  EXPECT_EQ(b.interval.sequences, 6 * tri);
  EXPECT_EQ(b.interval.batches, n);
  EXPECT_EQ(b.interval.mlm_loss_total, 7 * tri);
  EXPECT_EQ(b.interval.nsp_loss_total, n);
  EXPECT_EQ(b.eval.mlm_loss, tri + 0.5 * n);
  EXPECT_EQ(b.eval.sequences, 8 * n);
  EXPECT_EQ(b.energy.at(Component::cpu, Source::rapl), 10 * tri);
  EXPECT_EQ(b.energy.at(Component::gpu, Source::nvml), n);
  EXPECT_EQ(b.energy.total(), 10 * tri + n);

  // Every rank holds the same struct: rank 0's copy, broadcast, equals each rank's byte for byte.
  StepBoundary root = b;
  comm.broadcast({&root, sizeof root / sizeof(double), joule::collectives::DType::kFloat64}, 0, {})->wait();
  EXPECT_EQ(std::memcmp(&root, &b, sizeof b), 0);
}

TEST(StepBoundary, ReduceEnergySumsEveryProcesssMeters) {
  auto& comm = boundary_comm();
  const int r = comm.info().rank, n = comm.info().world_size;
  EnergyTotals local;
  local.at(Component::ram, Source::model) = r + 1;
  const EnergyTotals all = joule::trainer::reduce_energy(local, comm, 60);
  EXPECT_EQ(all.at(Component::ram, Source::model), n * (n + 1) / 2.0);
  EXPECT_EQ(local.at(Component::ram, Source::model), r + 1);  // the caller's own totals are left alone
}
