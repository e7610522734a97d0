// joule::parallel_for: every index once, on a fixed worker per index, and a worker's exception reaches the caller.
#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

#include "launch/util/parallel.h"

TEST(ParallelFor, EveryIndexOnceOnItsStrideWorker) {
  for (int threads : {1, 2, 3, 8}) {
    std::vector<std::atomic<int>> seen(100);
    std::vector<int> worker(100, -1);
    joule::parallel_for(100, threads, [&](size_t i, int w) {
      ++seen[i];
      worker[i] = w;
    });
    for (size_t i = 0; i < 100; ++i) {
      EXPECT_EQ(seen[i].load(), 1) << i;
      EXPECT_EQ(worker[i], static_cast<int>(i % static_cast<size_t>(threads))) << i;
    }
  }
  int calls = 0;
  joule::parallel_for(0, 4, [&](size_t, int) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST(ParallelFor, AWorkersExceptionIsRethrownToTheCaller) {
  for (int threads : {1, 2, 4}) {
    EXPECT_THROW(joule::parallel_for(1000, threads,
                                     [](size_t i, int) {
                                       if (i == 501) throw std::runtime_error("index 501");
                                     }),
                 std::runtime_error);
  }
}
