// The global shuffle at full scale: an exact permutation, disjoint equal shares for every rank, memory independent of
// N.
#include <gtest/gtest.h>

#include <fstream>
#include <set>

#include "data/data_error.h"
#include "data/shuffle.h"
#include "test_util.h"

using joule::data::DistributedSampler;
using joule::data::Permutation;
using joule::data::SamplerConfig;
using joule::data::SamplerState;

namespace {

int64_t resident_kib() {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    if (key == "VmRSS:") {
      int64_t kib;
      in >> kib;
      return kib;
    }
    in.ignore(1 << 20, '\n');
  }
  return -1;
}

}  // namespace

TEST(Shuffle, PermutationCoversEveryIndexExactlyOnce) {
  for (uint64_t n : std::vector<uint64_t>{1, 2, 3, 17, 1000, 65536, 100003}) {
    Permutation p(n, 42, 0);
    std::vector<bool> seen(n, false);
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t x = p(i);
      ASSERT_LT(x, n);
      ASSERT_FALSE(seen[x]) << "n=" << n << " index " << i << " maps to " << x << " twice";
      seen[x] = true;
    }
  }
  Permutation a(1000, 1, 0), b(1000, 1, 1), c(1000, 2, 0), d(1000, 1, 0);
  int same_epoch = 0, same_seed = 0;
  for (uint64_t i = 0; i < 1000; ++i) {
    same_epoch += a(i) == b(i);
    same_seed += a(i) == c(i);
    EXPECT_EQ(a(i), d(i));
  }
  EXPECT_LT(same_epoch, 20);  // another epoch or seed gives another order
  EXPECT_LT(same_seed, 20);
  EXPECT_THROW(a(1000), joule::InternalError);
}

TEST(Shuffle, ExactCoverageOfTenMillionOverFortyEightRanks) {
  const uint64_t n = 10'000'000, world = 48, micro = 8, global = micro * world * 2;
  std::vector<uint8_t> count(n, 0);
  uint64_t per_rank = 0;
  for (int r = 0; r < static_cast<int>(world); ++r) {
    DistributedSampler s({n, global, micro, static_cast<int>(world), r, 7});
    SamplerState st;
    uint64_t taken = 0;
    while (st.epoch == 0) {
      SamplerState before = st;
      auto ids = s.next(st);
      if (st.epoch != 0 || before.epoch != 0) break;
      for (uint64_t id : ids) ++count[id];
      taken += ids.size();
      if (st.position >= s.steps_per_epoch() * global) break;
    }
    if (r == 0) per_rank = taken;
    EXPECT_EQ(taken, per_rank) << "rank " << r << " got a different number of sequences";
  }
  const uint64_t used = (n / global) * global;
  uint64_t once = 0, twice = 0;
  for (uint8_t c : count) once += c == 1, twice += c > 1;
  EXPECT_EQ(twice, 0u);
  EXPECT_EQ(once, used);  // every usable index exactly once; the remainder n mod global is dropped
  EXPECT_EQ(per_rank * world, used);
}

TEST(Shuffle, CardScaleDisjointEqualAndMemoryIndependentOfN) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the resident-memory bound does not hold with a sanitizer's shadow memory";
#endif
  const uint64_t n = 450'000'000, world = 512, micro = 32, global = 65536;
  const int64_t rss_before = resident_kib();
  std::vector<DistributedSampler> ranks;
  for (int r = 0; r < static_cast<int>(world); ++r)
    ranks.emplace_back(SamplerConfig{n, global, micro, static_cast<int>(world), r, 1});
  EXPECT_EQ(ranks[0].steps_per_epoch(), n / global);
  EXPECT_EQ(ranks[0].accumulation(), 4u);
  // Sampled steps: first, middle, last of the epoch. Every rank equal count, all ids disjoint.
  for (uint64_t step : std::vector<uint64_t>{0, n / global / 2, n / global - 1}) {
    std::set<uint64_t> seen;
    for (int r = 0; r < static_cast<int>(world); ++r) {
      SamplerState st{0, step * global};
      for (uint64_t m = 0; m < ranks[r].accumulation(); ++m) {
        auto ids = ranks[r].next(st);
        ASSERT_EQ(ids.size(), micro);
        for (uint64_t id : ids) {
          ASSERT_LT(id, n);
          ASSERT_TRUE(seen.insert(id).second) << "id " << id << " given twice in step " << step;
        }
      }
      EXPECT_EQ(st.position, (step + 1) * global);
    }
    EXPECT_EQ(seen.size(), global);
  }
  const int64_t growth_kib = resident_kib() - rss_before;
  EXPECT_LT(growth_kib, 8 * 1024) << "512 samplers over 450M sequences must not materialize permutations";
}

TEST(Shuffle, SamplerRejectsImpossibleSplits) {
  EXPECT_THROW(DistributedSampler({1000, 100, 8, 4, 0, 1}), joule::data::SamplerError);  // 100 % 32 != 0
  EXPECT_THROW(DistributedSampler({10, 64, 8, 4, 0, 1}), joule::data::SamplerError);     // not one step
  EXPECT_THROW(DistributedSampler({1000, 64, 8, 4, 4, 1}), joule::data::SamplerError);   // rank outside
}
