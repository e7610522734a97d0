// The global shuffle at full scale: a permutation of blocks whose stream covers every sequence exactly once, disjoint
// equal shares for every rank, step sets independent of the world size, memory independent of N.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>

#include "data/data_error.h"
#include "data/shuffle.h"
#include "test_util.h"

using joule::data::BlockLayout;
using joule::data::BlockOrder;
using joule::data::DistributedSampler;
using joule::data::MicroBatchRows;
using joule::data::Permutation;
using joule::data::RowRun;
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

// The epoch's stream, block after block, as sequence ids.
std::vector<uint64_t> walk(const BlockOrder& order) {
  std::vector<uint64_t> ids;
  BlockOrder::Placed p = order.at(0);
  while (true) {
    EXPECT_EQ(p.start, ids.size());
    for (int64_t r = 0; r < p.block.rows; ++r)
      ids.push_back(order.layout().sequence_id(p.block.shard, p.block.row + r));
    if (p.index + 1 == order.layout().blocks()) return ids;
    p = order.after(p);
  }
}

// The ids of every step of epoch 0, from each rank's samplers at world size `world`.
std::vector<std::set<uint64_t>> steps_of(const BlockLayout& layout, uint64_t global, uint64_t micro, int world) {
  std::vector<std::set<uint64_t>> steps;
  for (int r = 0; r < world; ++r) {
    DistributedSampler s({layout, global, micro, world, r, 11});
    steps.resize(s.steps_per_epoch());
    SamplerState st;
    for (uint64_t step = 0; step < s.steps_per_epoch(); ++step)
      for (uint64_t m = 0; m < s.accumulation(); ++m)
        for (uint64_t id : s.next_ids(st)) EXPECT_TRUE(steps[step].insert(id).second) << "id " << id << " twice";
  }
  return steps;
}

}  // namespace

TEST(Shuffle, PermutationCoversEveryIndexExactlyOnceAndInverts) {
  for (uint64_t n : std::vector<uint64_t>{1, 2, 3, 17, 1000, 65536, 100003}) {
    Permutation p(n, 42, 0);
    std::vector<bool> seen(n, false);
    for (uint64_t i = 0; i < n; ++i) {
      const uint64_t x = p(i);
      ASSERT_LT(x, n);
      ASSERT_FALSE(seen[x]) << "n=" << n << " index " << i << " maps to " << x << " twice";
      seen[x] = true;
      ASSERT_EQ(p.inverse(x), i) << "n=" << n;
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
  EXPECT_THROW(a.inverse(1000), joule::InternalError);
}

TEST(Shuffle, BlocksCutEachShardAndOnlyItsLastIsShort) {
  const BlockLayout layout({37, 64, 5}, 8);
  EXPECT_EQ(layout.blocks(), 5u + 8u + 1u);
  EXPECT_EQ(layout.sequences(), 106u);
  EXPECT_EQ(layout.block(4), (BlockLayout::Block{0, 32, 5}));
  EXPECT_EQ(layout.block(5), (BlockLayout::Block{1, 0, 8}));
  EXPECT_EQ(layout.block(13), (BlockLayout::Block{2, 0, 5}));
  EXPECT_EQ(layout.short_blocks(), (std::vector<std::pair<uint64_t, int64_t>>{{4, 3}, {13, 3}}));
  EXPECT_EQ(layout.sequence_id(1, 3), 40u);
  EXPECT_EQ(layout.order_name(), "blocks of 8 rows");
  EXPECT_THROW(layout.block(14), joule::InternalError);
  EXPECT_THROW(BlockLayout({10, 0}, 8), joule::InternalError);
  EXPECT_THROW(BlockLayout({10}, 0), joule::InternalError);
}

TEST(Shuffle, EveryEpochStreamCoversEverySequenceOnceAndFindsEachPosition) {
  for (const auto& [rows, block_rows] : std::vector<std::pair<std::vector<int64_t>, int64_t>>{
           {{37, 64, 5, 100, 1}, 8}, {{1000}, 64}, {{3, 3, 3}, 4}, {{50, 70}, 1}}) {
    const BlockLayout layout(rows, block_rows);
    std::vector<std::vector<uint64_t>> epochs;
    for (uint64_t epoch : {0, 1}) {
      const BlockOrder order(layout, 7, epoch);
      const std::vector<uint64_t> ids = walk(order);
      ASSERT_EQ(ids.size(), layout.sequences());
      EXPECT_EQ(std::set<uint64_t>(ids.begin(), ids.end()).size(), ids.size());
      for (uint64_t p = 0; p < layout.sequences(); ++p) {  // at(p) finds the block the walk put p in
        const BlockOrder::Placed at = order.at(p);
        ASSERT_LE(at.start, p);
        ASSERT_LT(p, at.start + static_cast<uint64_t>(at.block.rows));
        ASSERT_EQ(layout.sequence_id(at.block.shard, at.block.row + static_cast<int64_t>(p - at.start)), ids[p]);
      }
      epochs.push_back(ids);
    }
    if (layout.blocks() > 4) {
      EXPECT_NE(epochs[0], epochs[1]) << "another epoch, another order";
    }
  }
  // One-row blocks are the permutation of single sequences that joule used before blocks (the recorded default).
  const BlockLayout single({50, 70}, 1);
  const std::vector<uint64_t> ids = walk(BlockOrder(single, 3, 2));
  const Permutation p(120, 3, 2);
  for (uint64_t i = 0; i < 120; ++i) EXPECT_EQ(ids[i], p(i));
}

TEST(Shuffle, StepSetsDoNotDependOnTheWorldSizeAndRanksReadFewBlocks) {
  const BlockLayout layout({301, 517, 64, 1000}, 16);
  const auto one = steps_of(layout, 64, 4, 1);
  EXPECT_EQ(steps_of(layout, 64, 4, 2), one);
  EXPECT_EQ(steps_of(layout, 64, 8, 4), one);
  EXPECT_EQ(steps_of(layout, 64, 2, 8), one);
  // A rank's micro-batch is a contiguous piece of the stream: 8 rows from at most two blocks of 16.
  DistributedSampler s({layout, 64, 8, 4, 3, 11});
  SamplerState st;
  for (int i = 0; i < 200; ++i) {
    const auto runs = s.next(st).runs;
    EXPECT_LE(runs.size(), 2u);
    int64_t rows = 0;
    for (const auto& run : runs) {
      EXPECT_GE(run.row, run.block.row);
      EXPECT_LE(run.row + run.count, run.block.row + run.block.rows);
      rows += run.count;
    }
    EXPECT_EQ(rows, 8);
  }
}

// Dropout keys a row by its index in the run's stream (models/dropout.h): that index must name the same sequence on
// every layout, over epochs too.
TEST(Shuffle, AStreamRowIsTheSameSequenceOnEveryLayout) {
  const BlockLayout layout({301, 517, 64, 1000}, 16);
  auto rows_of = [&](uint64_t micro, int world) {
    std::map<uint64_t, uint64_t> sequence_at;  // stream row index -> sequence id
    for (int r = 0; r < world; ++r) {
      DistributedSampler s({layout, 64, micro, world, r, 11});
      SamplerState st;
      for (uint64_t k = 0; k < 3 * s.steps_per_epoch() * s.accumulation(); ++k) {  // three epochs
        const MicroBatchRows rows = s.next(st);
        uint64_t index = rows.first_row_index();
        for (const RowRun& run : rows.runs)
          for (int64_t i = 0; i < run.count; ++i)
            EXPECT_TRUE(sequence_at.emplace(index++, layout.sequence_id(run.block.shard, run.row + i)).second);
      }
    }
    return sequence_at;
  };
  const auto one = rows_of(64, 1);
  EXPECT_EQ(one.size(), 3u * (1882 / 64) * 64);
  EXPECT_EQ(rows_of(16, 2), one);
  EXPECT_EQ(rows_of(4, 4), one);
  EXPECT_EQ(rows_of(8, 8), one);
}

TEST(Shuffle, AResumeWithAnotherGlobalBatchReadsEachSequenceOnce) {
  // One step of 32 on 2 ranks, then a resume with global batch 64 at position 32 (not a multiple of 64): its steps
  // begin at 32, and the epoch ends when the next step would not fit (32 + 15 x 64 = 992 of 1000).
  const BlockLayout layout({1000}, 16);
  std::set<uint64_t> seen;
  for (int r = 0; r < 2; ++r) {
    DistributedSampler first({layout, 32, 16, 2, r, 5});
    SamplerState st;
    for (uint64_t id : first.next_ids(st)) EXPECT_TRUE(seen.insert(id).second);
    EXPECT_EQ(st.position, 32u);
  }
  for (int r = 0; r < 2; ++r) {
    DistributedSampler resumed({layout, 64, 16, 2, r, 5});
    resumed.begin_at({0, 32});
    SamplerState st{0, 32};
    for (int m = 0; m < 15 * 2; ++m)
      for (uint64_t id : resumed.next_ids(st)) EXPECT_TRUE(seen.insert(id).second) << "id " << id << " read twice";
    EXPECT_EQ(st, (SamplerState{0, 992}));
    resumed.next_ids(st);
    EXPECT_EQ(st, (SamplerState{1, 32})) << "the next epoch begins its steps at 0";
  }
  EXPECT_EQ(seen.size(), 992u);
}

TEST(Shuffle, ExactCoverageOfTenMillionOverFortyEightRanks) {
  const uint64_t world = 48, micro = 8, global = micro * world * 2;
  const BlockLayout layout(std::vector<int64_t>(10, 1'000'003), 64);
  const uint64_t n = layout.sequences();
  std::vector<uint8_t> count(n, 0);
  uint64_t per_rank = 0;
  for (int r = 0; r < static_cast<int>(world); ++r) {
    DistributedSampler s({layout, global, micro, static_cast<int>(world), r, 7});
    SamplerState st;
    uint64_t taken = 0;
    while (st.position < s.steps_per_epoch() * global) {
      for (uint64_t id : s.next_ids(st)) ++count[id];
      taken += micro;
    }
    EXPECT_EQ(st.epoch, 0u);
    if (r == 0) per_rank = taken;
    EXPECT_EQ(taken, per_rank) << "rank " << r << " got a different number of sequences";
  }
  const uint64_t used = (n / global) * global;
  uint64_t once = 0, twice = 0;
  for (uint8_t c : count) once += c == 1, twice += c > 1;
  EXPECT_EQ(twice, 0u);
  EXPECT_EQ(once, used);  // every usable position exactly once; the remainder n mod global is dropped
  EXPECT_EQ(per_rank * world, used);
}

TEST(Shuffle, FullPretrainingScaleDisjointEqualAndMemoryIndependentOfN) {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "the resident-memory bound does not hold with a sanitizer's shadow memory";
#endif
  const uint64_t world = 512, micro = 32, global = 65536;
  // 450M sequences in 4,500 shards of 100,000 rows, 64-row chunks: every shard's last block is short (32 rows).
  const BlockLayout layout(std::vector<int64_t>(4500, 100'000), 64);
  const uint64_t n = layout.sequences();
  ASSERT_EQ(n, 450'000'000u);
  // What one rank holds: the layout and one epoch's order, O(shards); a materialized order would take 56 MB (7M
  // blocks) to 3.6 GB (450M sequences).
  const int64_t rss_before = resident_kib();
  DistributedSampler rank0({layout, global, micro, static_cast<int>(world), 0, 1});
  SamplerState st0{0, n / global / 2 * global};
  rank0.next(st0);
  const int64_t growth_kib = resident_kib() - rss_before;
  EXPECT_LT(growth_kib, 4 * 1024) << "a sampler over 450M sequences must not materialize its order";
  std::vector<DistributedSampler> ranks;
  for (int r = 0; r < static_cast<int>(world); ++r)
    ranks.emplace_back(SamplerConfig{layout, global, micro, static_cast<int>(world), r, 1});
  EXPECT_EQ(ranks[0].steps_per_epoch(), n / global);
  EXPECT_EQ(ranks[0].accumulation(), 4u);
  // Sampled steps: first, middle, last of the epoch. Every rank equal count, all ids disjoint.
  for (uint64_t step : std::vector<uint64_t>{0, n / global / 2, n / global - 1}) {
    std::set<uint64_t> seen;
    for (int r = 0; r < static_cast<int>(world); ++r) {
      SamplerState st{0, step * global};
      for (uint64_t m = 0; m < ranks[r].accumulation(); ++m) {
        auto ids = ranks[r].next_ids(st);
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
}

TEST(Shuffle, SamplerRejectsImpossibleSplits) {
  const BlockLayout thousand({1000}, 64), ten({10}, 64);
  EXPECT_THROW(DistributedSampler({thousand, 100, 8, 4, 0, 1}), joule::data::SamplerError);  // 100 % 32 != 0
  EXPECT_THROW(DistributedSampler({ten, 64, 8, 4, 0, 1}), joule::data::SamplerError);        // not one step
  EXPECT_THROW(DistributedSampler({thousand, 64, 8, 4, 4, 1}), joule::data::SamplerError);   // rank outside
}
