// main() for multi-rank GoogleTest binaries: every rank runs every test; failures print on every
// rank with a [rank N] prefix (rank 0 also prints the usual report); the exit code is the worst
// over all ranks, so one failing rank fails the whole run. A run in which every test that ran skipped itself on every
// rank (the nccl suite without GPUs) exits 77, which ctest's SKIP_RETURN_CODE reports as skipped, not passed.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

#include "launch/process.h"

namespace {

class RankFailurePrinter : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] FAILURE %s:%d\n%s\n", rank_, r.file_name() ? r.file_name() : "?", r.line_number(),
                   r.summary());
  }
  void OnTestEnd(const ::testing::TestInfo& info) override {
    if (info.result()->Failed())
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  int provided = 0, rank = 0;
  joule::launch::prefer_ring_allreduce();  // the all-reduce algorithm joule itself runs
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  ::testing::InitGoogleTest(&argc, argv);
  auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
  if (rank != 0) delete listeners.Release(listeners.default_result_printer());
  listeners.Append(new RankFailurePrinter(rank));
  int local = RUN_ALL_TESTS(), worst = 0;
  MPI_Allreduce(&local, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (rank == 0 && worst != 0 && local == 0) std::fprintf(stderr, "some other rank failed: see [rank N] lines above\n");
  const ::testing::UnitTest& run = *::testing::UnitTest::GetInstance();
  int only_skipped = run.skipped_test_count() > 0 && run.successful_test_count() == 0 && run.failed_test_count() == 0;
  int all_skipped = 0;
  MPI_Allreduce(&only_skipped, &all_skipped, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  MPI_Finalize();
  constexpr int kSkipped = 77;  // ctest: SKIP_RETURN_CODE 77
  return worst == 0 && all_skipped ? kSkipped : worst;
}
