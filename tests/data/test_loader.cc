// The prefetching loader: the rows the sampler names, resume equivalence (also across a world-size change), read
// errors, reopened shards; the blocks a data set is shuffled in.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <set>
#include <vector>

#include "data/create.h"
#include "data/loader.h"
#include "data/row_reader.h"
#include "data/shuffle.h"
#include "shard_variants.h"
#include "test_util.h"

using joule::data::SamplerState;

class LoaderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    joule::data::HostBatch b;
    b.resize(37, 8, 2);
    for (int64_t r = 0; r < 37; ++r) {
      b.input_ids[r * 8] = static_cast<int32_t>(r);  // the row id identifies the sequence
      b.input_mask[r * 8] = 1;
      b.masked_positions[r * 2] = 1;  // one masked prediction per row: a trainable shard
      b.masked_ids[r * 2] = 5;
    }
    joule::data::HostBatch c = b;
    for (int64_t r = 0; r < 37; ++r) c.input_ids[r * 8] = static_cast<int32_t>(100 + r);
    joule::data::write_shard(dir_.file("a.hdf5"), b, 8);
    joule::data::write_shard(dir_.file("b.hdf5"), c, 8);
    dataset_ = std::make_unique<joule::data::Dataset>(joule::data::Dataset::open(dir_.path()));
  }
  // The first column of every batch of `steps` global steps, rank by rank, as a global-step sequence.
  std::vector<std::set<int64_t>> run(int world, uint64_t micro, uint64_t global, SamplerState start, int steps,
                                     std::vector<SamplerState>* states = nullptr) {
    std::vector<std::set<int64_t>> per_step(static_cast<size_t>(steps));
    for (int r = 0; r < world; ++r) {
      joule::data::Loader loader(*dataset_, {dataset_->block_layout(), global, micro, world, r, 3}, start);
      for (int s = 0; s < steps; ++s) {
        for (uint64_t m = 0; m < loader.sampler().accumulation(); ++m) {
          auto batch = loader.next();
          for (int64_t i = 0; i < batch.input_ids.size(0); ++i)
            per_step[s].insert(batch.input_ids[i][0].item<int64_t>());
        }
        if (states && r == 0) states->push_back(loader.state());
      }
    }
    return per_step;
  }
  joule::test::TempDir dir_;
  std::unique_ptr<joule::data::Dataset> dataset_;
};

TEST_F(LoaderTest, ResumeYieldsTheUninterruptedBatches) {
  // 74 sequences, global batch 8: 9 steps an epoch; 20 steps cross two epoch boundaries.
  std::vector<SamplerState> states;
  auto full = run(2, 2, 8, {}, 20, &states);
  for (int k : {1, 5, 9, 13}) {
    auto rest = run(2, 2, 8, states[static_cast<size_t>(k - 1)], 20 - k);
    for (int s = 0; s < 20 - k; ++s)
      EXPECT_EQ(rest[s], full[static_cast<size_t>(k + s)]) << "resumed at step " << k << ", step " << s;
  }
  // Each epoch's steps are disjoint and cover 72 of the 74 sequences.
  std::set<int64_t> epoch0;
  for (int s = 0; s < 9; ++s) epoch0.insert(full[s].begin(), full[s].end());
  EXPECT_EQ(epoch0.size(), 72u);
}

TEST_F(LoaderTest, ResumeOnAnotherWorldSizeKeepsTheGlobalOrder) {
  std::vector<SamplerState> states;
  auto four = run(4, 2, 16, {}, 8, &states);  // 4 ranks x micro 2 x accumulation 2
  auto two = run(2, 2, 16, states[2], 5);     // resume after step 3 on 2 ranks (accumulation 4)
  for (int s = 0; s < 5; ++s) EXPECT_EQ(two[s], four[static_cast<size_t>(3 + s)]) << "step " << 3 + s;
}

TEST_F(LoaderTest, ShardsChangedAfterOpeningStopTheLoaderNamingTheShard) {
  // The shards are replaced after the dataset was opened: the open before the first read finds it (another size and
  // modification time), and the background thread's error reaches next().
  joule::test::write_file(dir_.file("a.hdf5"), "overwritten");
  joule::test::write_file(dir_.file("b.hdf5"), "overwritten");
  joule::data::Loader loader(*dataset_, {dataset_->block_layout(), 8, 2, 2, 0, 3}, {});
  try {
    loader.next();
    FAIL() << "reading a replaced shard must fail";
  } catch (const joule::data::ShardError& e) {
    EXPECT_NE(std::string(e.what()).find(".hdf5: changed while this job reads it"), std::string::npos) << e.what();
  }
}

TEST_F(LoaderTest, ReadErrorsSurfaceInNextNamingTheShard) {
  // A shard damaged in place, keeping its size and modification time: the read itself fails, naming the shard.
  for (const char* name : {"a.hdf5", "b.hdf5"}) {
    const std::string path = dir_.file(name);
    const auto when = std::filesystem::last_write_time(path);
    const auto bytes = std::filesystem::file_size(path);
    joule::test::write_file(path, std::string(bytes, 'x'));
    std::filesystem::last_write_time(path, when);
  }
  joule::data::Loader loader(*dataset_, {dataset_->block_layout(), 8, 2, 2, 0, 3}, {});
  try {
    loader.next();
    FAIL() << "reading a corrupted shard must fail";
  } catch (const joule::data::ShardError& e) {
    EXPECT_NE(std::string(e.what()).find(".hdf5: not an HDF5 file"), std::string::npos) << e.what();
  }
}

TEST_F(LoaderTest, ReopenedShardsGiveTheSameBatchesAndDestructionStopsPrefetching) {
  // reopen_shards() (the corrupt-shard fault's hook) closes the open files between reads: the batches do not
  // change. A loader destroyed while its thread is prefetching stops cleanly (ThreadSanitizer runs this too).
  std::vector<int64_t> plain, reopened;
  for (bool reopen : {false, true}) {
    joule::data::Loader loader(*dataset_, {dataset_->block_layout(), 8, 2, 2, 1, 3}, {}, {2, 1});
    for (int s = 0; s < 12; ++s) {
      if (reopen && s % 3 == 0) loader.reopen_shards();
      auto batch = loader.next();
      (reopen ? reopened : plain).push_back(batch.input_ids[0][0].item<int64_t>());
    }
  }
  EXPECT_EQ(plain, reopened);
  for (int i = 0; i < 20; ++i) {
    joule::data::Loader loader(*dataset_, {dataset_->block_layout(), 8, 2, 2, 0, 3}, {}, {4, 1});
    if (i % 2) loader.next();
  }
}

TEST_F(LoaderTest, BatchesHoldTheRowsTheSamplerNamesReadAsWholeChunks) {
  // Both shards are chunked by 8 rows: the data set is shuffled in blocks of 8 (37 rows: four blocks and one of 5).
  EXPECT_EQ(dataset_->block_rows(), 8);
  EXPECT_EQ(dataset_->block_layout().blocks(), 10u);
  for (int world : {1, 2}) {
    const joule::data::SamplerConfig config{dataset_->block_layout(), 8, 2, world, world - 1, 5};
    joule::data::DistributedSampler sampler(config);
    joule::data::Loader loader(*dataset_, config, {});
    SamplerState st;
    for (int i = 0; i < 60; ++i) {  // past the end of the first epoch (9 steps)
      const std::vector<uint64_t> ids = sampler.next_ids(st);
      const joule::data::HostBatch expected = joule::data::read_sequences(*dataset_, ids);
      const auto batch = loader.next();
      ASSERT_EQ(batch.input_ids.size(0), 2);
      for (int64_t r = 0; r < 2; ++r) {
        EXPECT_EQ(batch.input_ids[r][0].item<int64_t>(), expected.input_ids[r * 8]) << "micro-batch " << i;
        EXPECT_EQ(batch.masked_ids[r][0].item<int64_t>(), expected.masked_ids[r * 2]) << "micro-batch " << i;
      }
      EXPECT_EQ(loader.state(), st);
    }
  }
}

TEST(LoaderBlocks, TheSmallestChunkingCappedAndOneRowWithoutChunks) {
  joule::test::TempDir dir;
  joule::data::HostBatch b;
  b.resize(3000, 8, 2);
  for (int64_t r = 0; r < 3000; ++r) {
    b.input_mask[r * 8] = 1;
    b.masked_positions[r * 2] = 1;
  }
  joule::test::write_variant(dir.file("flat.hdf5"), b, "", nullptr);  // contiguous datasets: any row reads cheaply
  EXPECT_EQ(joule::data::Dataset::open(dir.file("flat.hdf5")).block_rows(), 1);
  std::filesystem::create_directories(dir.file("big"));
  joule::data::write_shard(dir.file("big/a.hdf5"), b, 2048);  // beyond the cap: blocks of 1024 rows
  EXPECT_EQ(joule::data::Dataset::open(dir.file("big")).block_rows(), joule::data::Dataset::kMaxBlockRows);
  joule::data::write_shard(dir.file("big/b.hdf5"), b, 16);  // the smallest chunking wins
  const auto mixed = joule::data::Dataset::open(dir.file("big"));
  EXPECT_EQ(mixed.block_rows(), 16);
  EXPECT_EQ(mixed.block_layout().order_name(), "blocks of 16 rows");
  EXPECT_EQ(mixed.block_layout().blocks(), 2 * ((3000 + 15) / 16u));
  // A small shard held in one chunk constrains nothing: the chunked shards keep their blocks.
  b.resize(5, 8, 2);
  for (int64_t r = 0; r < 5; ++r) b.input_mask[r * 8] = b.masked_positions[r * 2] = 1;
  joule::data::write_shard(dir.file("big/c.hdf5"), b, 5);
  EXPECT_EQ(joule::data::Dataset::open(dir.file("big")).block_rows(), 16);
}
