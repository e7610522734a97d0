// Shard schema validation (one test per malformed kind), the int64 layout, and the dataset index cache.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "data/dataset.h"
#include "data/shard.h"
#include "launch/util/hash.h"
#include "test_util.h"
#include "tests/support/shard_variants.h"

using joule::data::HostBatch;
using joule::data::ShardError;
using joule::test::TempDir;

namespace {

using joule::test::add_dataset;
using joule::test::small_batch;

// Writes a shard whose datasets are described by `write`, using raw HDF5 calls.
void write_custom(const std::string& path, const std::function<void(hid_t)>& write) {
  joule::data::Hdf5Handle f(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  write(f.get());
}

// A well-formed shard (small_batch), with one dataset replaced or dropped by the caller.
void write_variant(const std::string& path, const std::string& replace, const std::function<void(hid_t)>& replacement) {
  joule::test::write_variant(path, small_batch(), replace, replacement);
}

std::string validation_error(const std::string& path, int64_t vocab = 0) {
  try {
    joule::data::validate_shard(path, vocab);
  } catch (const ShardError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Shard, WriteReadRoundTripAndRowSelection) {
  TempDir dir;
  const HostBatch b = small_batch(70);  // more rows than one 64-row chunk
  joule::data::write_shard(dir.file("s.hdf5"), b);
  joule::data::ShardReader reader(dir.file("s.hdf5"));
  EXPECT_EQ(reader.sequences(), 70);
  EXPECT_EQ(reader.seq_len(), 8);
  EXPECT_EQ(reader.max_predictions(), 3);
  HostBatch all;
  reader.read_range(0, 70, all);
  EXPECT_EQ(all.input_ids, b.input_ids);
  EXPECT_EQ(all.input_mask, b.input_mask);
  EXPECT_EQ(all.segment_ids, b.segment_ids);
  EXPECT_EQ(all.masked_positions, b.masked_positions);
  EXPECT_EQ(all.masked_ids, b.masked_ids);
  EXPECT_EQ(all.next_sentence_labels, b.next_sentence_labels);

  HostBatch some;
  some.resize(4, 8, 3);
  reader.read_rows({66, 2, 66, 3}, some);  // any order, repeats allowed
  EXPECT_EQ(some.input_ids[0], 10 + 66);
  EXPECT_EQ(some.input_ids[8], 10 + 2);
  EXPECT_EQ(some.input_ids[16], 10 + 66);
  EXPECT_EQ(some.input_ids[24], 10 + 3);
  EXPECT_EQ(some.next_sentence_labels, (std::vector<int32_t>{0, 0, 0, 1}));

  auto stats = joule::data::validate_shard(dir.file("s.hdf5"), 100);
  EXPECT_EQ(stats.sequences, 70);
  EXPECT_EQ(stats.masked_predictions, 140);
  EXPECT_EQ(stats.max_token_id, 10 + 69 + 7);
  EXPECT_EQ(stats.real_tokens, 70 * 7);
}

TEST(Shard, AppendsOfAnySizeReadBackAsOneShard) {
  // Slices that cut the 64-row chunks anywhere: the writer's pending rows, topped up and written in order.
  TempDir dir;
  const HostBatch all = small_batch(400, 8, 3);
  const int64_t slices[] = {1, 63, 64, 65, 2, 130, 7, 68};  // 400 rows
  for (const bool growing : {true, false}) {
    const std::string path = dir.file(growing ? "growing.hdf5" : "fixed.hdf5");
    joule::data::ShardWriter writer(path, growing ? joule::data::ShardWriter::kGrowing : 400, 8, 3, 64, 2);
    int64_t row = 0;
    for (const int64_t rows : slices) {
      HostBatch slice;
      slice.resize(rows, 8, 3);
      for (int64_t r = 0; r < rows; ++r) joule::data::copy_row(all, row + r, slice, r);
      writer.append(slice);
      row += rows;
    }
    ASSERT_EQ(row, 400);
    writer.commit();
    joule::data::ShardReader reader(path);
    HostBatch back;
    reader.read_range(0, 400, back);
    EXPECT_EQ(back.input_ids, all.input_ids) << path;
    EXPECT_EQ(back.input_mask, all.input_mask) << path;
    EXPECT_EQ(back.segment_ids, all.segment_ids) << path;
    EXPECT_EQ(back.masked_positions, all.masked_positions) << path;
    EXPECT_EQ(back.masked_ids, all.masked_ids) << path;
    EXPECT_EQ(back.next_sentence_labels, all.next_sentence_labels) << path;
  }
}

TEST(Shard, AcceptsTheOlderInt64Layout) {
  TempDir dir;
  HostBatch b = small_batch();
  write_custom(dir.file("old.hdf5"), [&](hid_t f) {
    const std::vector<int32_t>* cols[] = {&b.input_ids,        &b.input_mask, &b.segment_ids,
                                          &b.masked_positions, &b.masked_ids, &b.next_sentence_labels};
    for (int c = 0; c < 6; ++c) {
      std::vector<int64_t> wide(cols[c]->begin(), cols[c]->end());
      std::vector<hsize_t> dims = {5};
      if (c < 3)
        dims.push_back(8);
      else if (c < 5)
        dims.push_back(3);
      add_dataset(f, joule::data::kShardDatasets[c], H5T_STD_I64LE, dims, wide.data(), H5T_NATIVE_INT64);
    }
  });
  auto stats = joule::data::validate_shard(dir.file("old.hdf5"), 100);
  EXPECT_TRUE(stats.int64_layout);
  HostBatch read;
  joule::data::ShardReader(dir.file("old.hdf5")).read_range(0, 5, read);
  EXPECT_EQ(read.input_ids, b.input_ids);
}

TEST(Shard, EachMalformedKindNamesFileAndDataset) {
  TempDir dir;
  struct Case {
    const char* what;
    std::string dataset;
    std::function<void(hid_t)> replacement;  // nullptr: dataset missing
    const char* expect;
    int64_t vocab = 0;
  };
  const std::vector<float> floats(5 * 8, 1.0f);
  const std::vector<int32_t> ids_1d(5, 1), rows4(4 * 8, 1), big_ids(5 * 8, 5000), bad_pos(5 * 3, 9), bad_mask(5 * 8, 2),
      wide_mask(5 * 9, 1), bad_label(5, 3), negative(5 * 8, -4);
  std::vector<Case> cases = {
      {"missing dataset", "masked_lm_ids", nullptr, "dataset 'masked_lm_ids': missing"},
      {"wrong dtype", "input_ids",
       [&](hid_t f) {
         add_dataset(f, "input_ids", H5T_IEEE_F32LE, {5, 8}, floats.data(), H5T_NATIVE_FLOAT);
       },
       "dataset 'input_ids': expected an integer type"},
      {"wrong rank", "input_ids",
       [&](hid_t f) { add_dataset(f, "input_ids", H5T_STD_I32LE, {5}, ids_1d.data(), H5T_NATIVE_INT32); },
       "dataset 'input_ids': expected shape [N, width]"},
      {"row count mismatch", "input_mask",
       [&](hid_t f) {
         add_dataset(f, "input_mask", H5T_STD_I8LE, {4, 8}, rows4.data(), H5T_NATIVE_INT32);
       },
       "dataset 'input_mask': has 4 rows but input_ids has 5"},
      {"width mismatch", "segment_ids",
       [&](hid_t f) {
         add_dataset(f, "segment_ids", H5T_STD_I8LE, {5, 9}, wide_mask.data(), H5T_NATIVE_INT32);
       },
       "dataset 'segment_ids': expected shape [5, 8] like input_ids, found [5, 9]"},
      {"ids beyond vocab", "input_ids",
       [&](hid_t f) {
         add_dataset(f, "input_ids", H5T_STD_I32LE, {5, 8}, big_ids.data(), H5T_NATIVE_INT32);
       },
       "token id 5000 is not below the vocabulary size 1000", 1000},
      {"negative ids", "input_ids",
       [&](hid_t f) {
         add_dataset(f, "input_ids", H5T_STD_I32LE, {5, 8}, negative.data(), H5T_NATIVE_INT32);
       },
       "dataset 'input_ids': negative token id -4"},
      {"positions beyond seq len", "masked_lm_positions",
       [&](hid_t f) {
         add_dataset(f, "masked_lm_positions", H5T_STD_I32LE, {5, 3}, bad_pos.data(), H5T_NATIVE_INT32);
       },
       "dataset 'masked_lm_positions': position 9 is outside the sequence length 8"},
      {"mask not 0/1", "input_mask",
       [&](hid_t f) {
         add_dataset(f, "input_mask", H5T_STD_I8LE, {5, 8}, bad_mask.data(), H5T_NATIVE_INT32);
       },
       "dataset 'input_mask': values must be 0 or 1, found 2"},
      {"label not 0/1", "next_sentence_labels",
       [&](hid_t f) { add_dataset(f, "next_sentence_labels", H5T_STD_I8LE, {5}, bad_label.data(), H5T_NATIVE_INT32); },
       "dataset 'next_sentence_labels': values must be 0 or 1, found 3"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    const std::string path = dir.file("bad.hdf5");
    write_variant(path, c.dataset, c.replacement);
    const std::string e = validation_error(path, c.vocab);
    EXPECT_NE(e.find(path), std::string::npos) << e;
    EXPECT_NE(e.find(c.expect), std::string::npos) << e;
  }
}

TEST(Shard, EmptyTruncatedAndForeignFilesAreClearErrors) {
  TempDir dir;
  HostBatch empty;
  empty.resize(0, 8, 3);
  joule::data::write_shard(dir.file("empty.hdf5"), empty);
  EXPECT_NE(validation_error(dir.file("empty.hdf5")).find("empty shard (0 sequences)"), std::string::npos);

  joule::test::write_file(dir.file("text.hdf5"), "this is not hdf5\n");
  EXPECT_NE(validation_error(dir.file("text.hdf5")).find("text.hdf5: not an HDF5 file"), std::string::npos);

  joule::data::write_shard(dir.file("full.hdf5"), small_batch(200));
  const std::string bytes = joule::test::read_file(dir.file("full.hdf5"));
  joule::test::write_file(dir.file("cut.hdf5"), bytes.substr(0, bytes.size() / 2));
  const std::string e = validation_error(dir.file("cut.hdf5"));
  EXPECT_NE(e.find("cut.hdf5"), std::string::npos) << e;
  EXPECT_FALSE(e.empty());

  EXPECT_NE(validation_error(dir.file("nope.hdf5")).find("nope.hdf5: no such shard file"), std::string::npos);
}

TEST(Dataset, IndexIsCachedAndAChangedFileIsValidatedAgain) {
  TempDir dir;
  joule::data::write_shard(dir.file("a.hdf5"), small_batch(5));
  joule::data::write_shard(dir.file("b.hdf5"), small_batch(7));
  // What a rank waiting for another's open() expects it to read: both shards, then none, then the changed one.
  using joule::data::Dataset;
  const auto bytes_of = [&](const char* name) { return std::filesystem::file_size(dir.file(name)); };
  EXPECT_EQ(Dataset::bytes_to_validate(dir.path()), bytes_of("a.hdf5") + bytes_of("b.hdf5"));
  auto first = joule::data::Dataset::open(dir.path());
  EXPECT_EQ(Dataset::bytes_to_validate(dir.path()), 0u);
  EXPECT_EQ(Dataset::bytes_to_validate(dir.path(), {0, false}), bytes_of("a.hdf5") + bytes_of("b.hdf5"));  // no cache
  EXPECT_EQ(Dataset::bytes_to_validate(dir.file("a.hdf5")), 0u);     // one shard, its cache beside it
  EXPECT_EQ(Dataset::bytes_to_validate(dir.file("nope.hdf5")), 0u);  // open() names what is wrong, not this
  EXPECT_EQ(first.size(), 12);
  EXPECT_EQ(first.validated_now(), 2);
  EXPECT_TRUE(std::filesystem::exists(dir.file(".joule-index.json")));
  EXPECT_EQ(first.locate(0), (std::pair<size_t, int64_t>{0, 0}));
  EXPECT_EQ(first.locate(6), (std::pair<size_t, int64_t>{1, 1}));

  auto second = joule::data::Dataset::open(dir.path());
  EXPECT_EQ(second.validated_now(), 0);
  EXPECT_EQ(second.size(), 12);

  joule::data::write_shard(dir.file("b.hdf5"), small_batch(9));  // changed size and mtime
  EXPECT_EQ(Dataset::bytes_to_validate(dir.path()), bytes_of("b.hdf5"));
  auto third = joule::data::Dataset::open(dir.path());
  EXPECT_EQ(third.validated_now(), 1);
  EXPECT_EQ(third.size(), 14);

  // A vocabulary check uses the cached maximum id, without reading the data again.
  try {
    joule::data::Dataset::open(dir.path(), {20, true});
    FAIL() << "ids up to 10+8+7 exceed a 20-token vocabulary";
  } catch (const ShardError& e) {
    EXPECT_NE(std::string(e.what()).find("a.hdf5"), std::string::npos) << e.what();
  }

  // List files and globs name the same shards.
  joule::test::write_file(dir.file("list.txt"), "a.hdf5\n# comment\nb.hdf5\n");
  EXPECT_EQ(joule::data::Dataset::open(dir.file("list.txt")).size(), 14);
  EXPECT_EQ(joule::data::Dataset::open(dir.path() + "/*.hdf5").size(), 14);
  EXPECT_THROW(joule::data::Dataset::open(dir.file("nothing-*.hdf5")), ShardError);
}

TEST(Dataset, AShardReplacedKeepingSizeAndMtimeIsValidatedAgain) {
  TempDir dir;
  joule::data::HostBatch a = small_batch(6), b = small_batch(6);
  joule::data::write_shard(dir.file("s.hdf5"), a);
  // Other content of the same compressed size (same shapes; the first changed token that keeps the size).
  for (int32_t token = 1; token < 200; ++token) {
    b.input_ids[3] = token;
    joule::data::write_shard(dir.file("other.hdf5.tmp-src"), b);
    if (b.input_ids[3] != a.input_ids[3] &&
        std::filesystem::file_size(dir.file("other.hdf5.tmp-src")) == std::filesystem::file_size(dir.file("s.hdf5")))
      break;
  }
  EXPECT_EQ(joule::data::Dataset::open(dir.file("s.hdf5")).validated_now(), 1);
  struct stat before {};
  ASSERT_EQ(::stat(dir.file("s.hdf5").c_str(), &before), 0);
  std::filesystem::copy_file(dir.file("other.hdf5.tmp-src"), dir.file("s.hdf5"),
                             std::filesystem::copy_options::overwrite_existing);
  const struct timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, dir.file("s.hdf5").c_str(), times, 0), 0);
  struct stat after {};
  ASSERT_EQ(::stat(dir.file("s.hdf5").c_str(), &after), 0);
  ASSERT_EQ(after.st_size, before.st_size);
  ASSERT_EQ(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
  EXPECT_EQ(joule::data::Dataset::open(dir.file("s.hdf5")).validated_now(), 1)
      << "the cache trusted size and mtime alone";
}

TEST(Dataset, ShardsOfDifferentShapesAreRefused) {
  TempDir dir;
  joule::data::write_shard(dir.file("a.hdf5"), small_batch(5, 8, 3));
  joule::data::write_shard(dir.file("b.hdf5"), small_batch(5, 16, 3));
  try {
    joule::data::Dataset::open(dir.path());
    FAIL();
  } catch (const ShardError& e) {
    EXPECT_NE(std::string(e.what()).find("b.hdf5"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("one dataset must have one shape"), std::string::npos) << e.what();
  }
}

TEST(Dataset, IdentityIsEachShardsNameSizeSequencesAndContentAndSurvivesAMove) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("data"));
  joule::data::write_shard(dir.file("data/a.hdf5"), small_batch(5));
  joule::data::write_shard(dir.file("data/b.hdf5"), small_batch(7));
  const auto d = joule::data::Dataset::open(dir.file("data"));
  const std::vector<joule::data::ShardIdentity> id = d.identity();
  ASSERT_EQ(id.size(), 2u);
  EXPECT_EQ(id[0].name, "a.hdf5");
  EXPECT_EQ(id[1].sequences, 7);
  EXPECT_EQ(id[1].bytes, std::filesystem::file_size(dir.file("data/b.hdf5")));
  EXPECT_EQ(id[1].checksum, joule::hex64(joule::fnv1a64_file(dir.file("data/b.hdf5"))));
  EXPECT_EQ(joule::data::describe_changes(id, id), "");

  // The same data set in another directory (a copy on a node's local disk) is the same data.
  std::filesystem::copy(dir.file("data"), dir.file("moved"));
  std::filesystem::remove(dir.file("moved/.joule-index.json"));
  const auto moved = joule::data::Dataset::open(dir.file("moved"));
  EXPECT_EQ(moved.digest(), d.digest());
  EXPECT_EQ(moved.validated_now(), 2);  // validated again, checksums computed again: equal

  // A rewritten, a removed and an added shard are each named.
  joule::data::write_shard(dir.file("moved/a.hdf5"), small_batch(5, 8, 3, 11));
  std::filesystem::remove(dir.file("moved/b.hdf5"));
  joule::data::write_shard(dir.file("moved/c.hdf5"), small_batch(7));
  const auto changed = joule::data::Dataset::open(dir.file("moved"));
  EXPECT_NE(changed.digest(), d.digest());
  const std::string changes = joule::data::describe_changes(id, changed.identity());
  EXPECT_NE(changes.find("changed: a.hdf5 (recorded: "), std::string::npos) << changes;
  EXPECT_NE(changes.find("removed: b.hdf5"), std::string::npos) << changes;
  EXPECT_NE(changes.find("added: c.hdf5"), std::string::npos) << changes;
}

TEST(Dataset, AShardChangedAfterOpeningIsAnErrorAtItsNextOpen) {
  TempDir dir;
  joule::data::write_shard(dir.file("a.hdf5"), small_batch(5));
  joule::data::write_shard(dir.file("b.hdf5"), small_batch(7));
  const auto d = joule::data::Dataset::open(dir.path());
  EXPECT_NO_THROW(d.check_unchanged(0));
  joule::data::write_shard(dir.file("a.hdf5"), small_batch(6));
  std::filesystem::remove(dir.file("b.hdf5"));
  for (size_t shard : {0, 1}) {
    try {
      d.check_unchanged(shard);
      FAIL() << "shard " << shard << " changed";
    } catch (const ShardError& e) {
      const std::string name = shard == 0 ? "a.hdf5" : "b.hdf5";
      EXPECT_NE(std::string(e.what()).find(name + ": changed while this job reads it"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(shard == 0 ? "now it has" : "now it cannot be read"), std::string::npos)
          << e.what();
    }
  }
}
