// Sequence packing: the packing algorithm, packed rows written and read back, and every malformed packed row refused
// with the shard, the row and the sequence named.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <numeric>
#include <random>
#include <set>

#include <nlohmann/json.hpp>

#include "data/dataset.h"
#include "data/hdf5.h"
#include "data/loader.h"
#include "data/pack.h"
#include "data/row_reader.h"
#include "data/shard.h"
#include "test_util.h"

namespace d = joule::data;
using joule::test::TempDir;

namespace {

// Unpacked rows of `lengths` real tokens each (row r's tokens 1000 * r + i), 1 to 3 predictions inside each.
d::HostBatch rows_of(const std::vector<int32_t>& lengths, int64_t len, int64_t preds) {
  d::HostBatch b;
  b.resize(static_cast<int64_t>(lengths.size()), len, preds);
  for (int64_t r = 0; r < b.rows; ++r) {
    const int32_t n = lengths[static_cast<size_t>(r)];
    for (int32_t i = 0; i < n; ++i) {
      b.input_ids[r * len + i] = static_cast<int32_t>(1000 * r + i + 1);
      b.input_mask[r * len + i] = 1;
      b.segment_ids[r * len + i] = i >= n / 2 ? 1 : 0;
    }
    const int32_t used = std::min<int32_t>(static_cast<int32_t>(preds), std::max(1, n / 4));
    for (int32_t k = 0; k < used; ++k) {
      b.masked_positions[r * preds + k] = 1 + k * (n - 2) / std::max(1, used);
      b.masked_ids[r * preds + k] = 7 + k;
    }
    b.next_sentence_labels[static_cast<size_t>(r)] = static_cast<int32_t>(r % 2);
  }
  return b;
}

// Every row of `packs` written into a packed batch.
d::HostBatch packed_rows(const d::HostBatch& in, const std::vector<std::vector<uint32_t>>& packs, int k) {
  d::HostBatch out;
  out.resize(static_cast<int64_t>(packs.size()), in.seq_len, d::packed_max_predictions(in.max_predictions, k), k);
  for (size_t p = 0; p < packs.size(); ++p) {
    std::vector<d::SequenceView> views;
    for (uint32_t s : packs[p]) views.push_back(d::sequence_of(in, s));
    d::write_packed_row(views.data(), static_cast<int>(views.size()), out, static_cast<int64_t>(p));
  }
  return out;
}

std::string validation_error(const std::string& path) {
  try {
    d::validate_shard(path);
  } catch (const d::ShardError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(Pack, EverySequenceOnceWithinTheRowAndItsCount) {
  std::mt19937 gen(7);
  std::uniform_int_distribution<int32_t> length(1, 128);
  std::vector<int32_t> lengths(5000);
  for (auto& l : lengths) l = length(gen);
  for (int k : {1, 2, 3, 8}) {
    for (const auto& packs : {d::pack_sequences(lengths, 128, k), d::pack_best_fit(lengths, 128, k),
                              d::pack_gap_filling(lengths, 128, k)}) {
      std::vector<int> seen(lengths.size(), 0);
      for (const auto& p : packs) {
        ASSERT_FALSE(p.empty());
        ASSERT_LE(static_cast<int>(p.size()), k);
        int64_t tokens = 0;
        for (uint32_t s : p) {
          ++seen[s];
          tokens += lengths[s];
        }
        ASSERT_LE(tokens, 128);
      }
      EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; })) << "k " << k;
      if (k == 1) {
        EXPECT_EQ(packs.size(), lengths.size());
      }
    }
    EXPECT_EQ(d::pack_sequences(lengths, 128, k), d::pack_sequences(lengths, 128, k)) << "deterministic";
  }
  // Uniform lengths in [1, 128]: real tokens are ~50 % of padded rows; best-fit packing leaves under 2 % empty.
  const auto packs = d::pack_sequences(lengths, 128, 8);
  const double real = std::accumulate(lengths.begin(), lengths.end(), 0.0);
  EXPECT_GT(real / (128.0 * static_cast<double>(packs.size())), 0.98);
}

// Lengths drawn from Wikipedia's at 512 (tests/fixtures/packing/wikipedia_lengths_512.json: Krell et al.'s published
// histogram in bins of 16 tokens), uniform within a bin. About half of their padded tokens are padding.
std::vector<int32_t> wikipedia_like_lengths(size_t n, uint32_t seed) {
  std::ifstream in(std::string(JOULE_TEST_FIXTURES) + "/packing/wikipedia_lengths_512.json");
  const nlohmann::json hist = nlohmann::json::parse(in);
  std::vector<double> weights = hist.at("thousands").get<std::vector<double>>();
  const int width = hist.at("bin_width").get<int>(), bins = static_cast<int>(weights.size());
  weights.push_back(hist.at("thousands_at_512").get<double>());
  std::mt19937 gen(seed);
  std::discrete_distribution<int> bin(weights.begin(), weights.end());
  std::vector<int32_t> lengths(n);
  for (auto& l : lengths) {
    const int b = bin(gen);
    l = b == bins ? 512 : std::uniform_int_distribution<int32_t>(width * b + 1, std::min(width * b + width, 511))(gen);
  }
  return lengths;
}

double efficiency(const std::vector<int32_t>& lengths, const std::vector<std::vector<uint32_t>>& packs, int64_t row) {
  const double real = std::accumulate(lengths.begin(), lengths.end(), 0.0);
  return real / (static_cast<double>(row) * static_cast<double>(packs.size()));
}

TEST(Pack, WikipediaLengthsAt512FillRowsThreeAtATime) {
  // NVIDIA's MLPerf setting: at most 3 sequences a row. Best fit alone strands the short sequences (~10 % of the
  // rows empty); filling each long sequence's gap with a pair leaves under 1 %.
  const std::vector<int32_t> lengths = wikipedia_like_lengths(20000, 3);
  const double before = std::accumulate(lengths.begin(), lengths.end(), 0.0) / (512.0 * 20000);
  EXPECT_NEAR(before, 0.5, 0.03);
  const auto best_fit = d::pack_best_fit(lengths, 512, 3);
  const auto packs = d::pack_sequences(lengths, 512, 3);
  EXPECT_LT(efficiency(lengths, best_fit, 512), 0.95);
  EXPECT_GE(efficiency(lengths, packs, 512), 0.99);
  EXPECT_EQ(packs, d::pack_gap_filling(lengths, 512, 3));
  std::vector<int> seen(lengths.size(), 0);
  for (const auto& p : packs) {
    ASSERT_LE(p.size(), 3u);
    int64_t tokens = 0;
    for (uint32_t s : p) tokens += lengths[s], ++seen[s];
    ASSERT_LE(tokens, 512);
  }
  EXPECT_TRUE(std::all_of(seen.begin(), seen.end(), [](int n) { return n == 1; }));
}

TEST(Pack, FillsRowsExactlyWhenTheLengthsAllowIt) {
  // 100 + 28, 64 + 64, 40 + 40 + 48: three full rows, whatever the input order.
  const std::vector<int32_t> lengths = {40, 64, 28, 100, 48, 64, 40};
  const auto packs = d::pack_sequences(lengths, 128, 3);
  ASSERT_EQ(packs.size(), 3u);
  for (const auto& p : packs) {
    int64_t tokens = 0;
    for (uint32_t s : p) tokens += lengths[s];
    EXPECT_EQ(tokens, 128);
  }
  EXPECT_THROW(d::pack_sequences({0}, 128, 3), joule::InternalError);
  EXPECT_THROW(d::pack_sequences({129}, 128, 3), joule::InternalError);
}

TEST(Pack, PackedShardRoundTripsEverySequence) {
  TempDir dir;
  const std::vector<int32_t> lengths = {30, 12, 64, 7, 50, 31, 16, 2, 64, 40};
  const d::HostBatch in = rows_of(lengths, 64, 6);
  const auto packs = d::pack_sequences(lengths, 64, 3);
  const d::HostBatch packed = packed_rows(in, packs, 3);
  const std::string path = dir.file("packed.hdf5");
  d::write_shard(path, packed);
  const d::ShardStats stats = d::validate_shard(path);
  EXPECT_EQ(stats.pack, 3);
  EXPECT_EQ(stats.sequences, static_cast<int64_t>(packs.size()));
  EXPECT_EQ(stats.packed_sequences, static_cast<int64_t>(lengths.size()));
  EXPECT_EQ(stats.real_tokens, std::accumulate(lengths.begin(), lengths.end(), int64_t{0}));

  d::HostBatch back;
  d::ShardReader(path).read_range(0, stats.sequences, back);
  ASSERT_EQ(back.pack, 3);
  for (size_t p = 0; p < packs.size(); ++p) {
    const int64_t row = static_cast<int64_t>(p);
    ASSERT_EQ(back.sequences_in(row), static_cast<int64_t>(packs[p].size()));
    int32_t start = 0, slot = 0;
    for (size_t k = 0; k < packs[p].size(); ++k) {
      const d::SequenceView original = d::sequence_of(in, packs[p][k]);
      ASSERT_EQ(back.sequence_lengths[row * 3 + k], original.length);
      ASSERT_EQ(back.masked_lengths[row * 3 + k], original.masked);
      EXPECT_EQ(back.next_sentence_labels[row * 3 + k], original.next_sentence_label);
      for (int32_t i = 0; i < original.length; ++i) {
        ASSERT_EQ(back.input_ids[row * 64 + start + i], original.input_ids[i]);
        ASSERT_EQ(back.segment_ids[row * 64 + start + i], original.segment_ids[i]);
      }
      for (int32_t i = 0; i < original.masked; ++i) {
        ASSERT_EQ(back.masked_positions[row * back.max_predictions + slot + i], start + original.masked_positions[i]);
        ASSERT_EQ(back.masked_ids[row * back.max_predictions + slot + i], original.masked_ids[i]);
      }
      start += original.length;
      slot += original.masked;
    }
  }
}

TEST(Pack, MalformedPackedRowsNameTheShardRowAndSequence) {
  TempDir dir;
  const std::vector<int32_t> lengths = {30, 12, 20, 7};
  const d::HostBatch in = rows_of(lengths, 64, 6);
  const d::HostBatch good = packed_rows(in, {{0, 1, 2}, {3}}, 3);  // row 0: 30 + 12 + 20 = 62 tokens
  struct Case {
    std::string name, expected;
    std::function<void(d::HostBatch&)> spoil;
  };
  const std::vector<Case> cases = {
      {"lengths_short", "lengths add up to 61 tokens but input_mask marks 62",
       [](d::HostBatch& b) { b.sequence_lengths[2] = 19; }},
      {"past_the_row", "runs past the row's 64 tokens", [](d::HostBatch& b) { b.sequence_lengths[2] = 30; }},
      {"gap", "after an empty slot",
       [](d::HostBatch& b) {
         b.sequence_lengths[1] = 0;
         b.masked_lengths[1] = 0;
       }},
      {"position_outside", "is outside sequence 0 [1, 30)",
       [](d::HostBatch& b) { b.masked_positions[0] = 35; }},  // sequence 0's first prediction, in sequence 1
      {"cls_masked", "is outside sequence 1 [31, 42)",
       [&](d::HostBatch& b) { b.masked_positions[static_cast<size_t>(d::sequence_of(in, 0).masked)] = 30; }},
      {"masked_count", "the lengths count", [](d::HostBatch& b) { b.masked_lengths[2] -= 1; }},
      {"empty_with_predictions", "predictions for the empty sequence 2",
       [](d::HostBatch& b) { b.masked_lengths[3 + 2] = 1; }},
      {"negative", "negative value -3", [](d::HostBatch& b) { b.sequence_lengths[3 + 1] = -3; }},
      {"label", "values must be 0 or 1, found 2", [](d::HostBatch& b) { b.next_sentence_labels[1] = 2; }},
  };
  for (const Case& c : cases) {
    d::HostBatch bad = good;
    c.spoil(bad);
    const std::string path = dir.file(c.name + ".hdf5");
    d::write_shard(path, bad);
    const std::string error = validation_error(path);
    EXPECT_NE(error.find(path), std::string::npos) << c.name << ": " << error;
    EXPECT_NE(error.find(c.expected), std::string::npos) << c.name << ": " << error;
    EXPECT_NE(error.find("row "), std::string::npos) << c.name << ": " << error;
  }
}

TEST(Pack, ADatasetIsPackedOneWayAndTheLoaderCountsSequences) {
  TempDir dir;
  const std::vector<int32_t> lengths = {30, 12, 20, 7, 9, 41};
  const d::HostBatch in = rows_of(lengths, 64, 6);
  std::filesystem::create_directories(dir.file("mixed"));
  d::write_shard(dir.file("mixed/a.hdf5"), packed_rows(in, {{0, 1, 2}, {3, 4, 5}}, 3));
  d::write_shard(dir.file("mixed/b.hdf5"), in);
  try {
    d::Dataset::open(dir.file("mixed"), {0, false});
    ADD_FAILURE() << "a mixed dataset opened";
  } catch (const d::ShardError& e) {
    EXPECT_NE(std::string(e.what()).find("packed one way"), std::string::npos) << e.what();
  }
  std::filesystem::remove(dir.file("mixed/b.hdf5"));
  const d::Dataset packed = d::Dataset::open(dir.file("mixed"), {0, false});
  EXPECT_EQ(packed.size(), 2);
  EXPECT_EQ(packed.sequences(), 6);
  EXPECT_NEAR(packed.packing_efficiency(), 119.0 / 128.0, 1e-12);
  const d::PretrainingBatch b = d::Loader::to_tensors(d::read_sequences(packed, {1, 0}));
  ASSERT_TRUE(b.packed());
  EXPECT_EQ(b.sequence_count(), 6);
  EXPECT_EQ(b.sequence_lengths.sizes(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(b.next_sentence_labels.sizes(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(b.sequence_lengths[0][2].item<int64_t>(), 41);
}

TEST(Pack, PackDataSetWritesAPackedDataSetAndResumes) {
  TempDir dir;
  std::vector<int32_t> lengths;
  for (int i = 0; i < 300; ++i) lengths.push_back(2 + (i * 37) % 62);
  std::filesystem::create_directories(dir.file("in"));
  d::write_shard(dir.file("in/a.hdf5"), rows_of(lengths, 64, 6));
  d::write_shard(dir.file("in/b.hdf5"), rows_of(std::vector<int32_t>(lengths.begin(), lengths.begin() + 100), 64, 6));
  d::PackOptions o;
  o.in = dir.file("in");
  o.out = dir.file("out");
  const d::PackSummary s = d::pack_data_set(o);
  EXPECT_EQ(s.sequences, 400);
  EXPECT_EQ(s.rows_before, 400);
  EXPECT_LT(s.rows_after, 250);
  EXPECT_GT(s.efficiency_after, 0.95);
  const d::Dataset packed = d::Dataset::open(d::data_create_split(o.out, "train"), {0, false});
  EXPECT_EQ(packed.sequences(), 400);
  EXPECT_EQ(packed.size(), s.rows_after);
  EXPECT_EQ(packed.pack(), 3);
  // The same arguments again: nothing to do; packing the packed data is refused.
  EXPECT_TRUE(d::pack_data_set(o).already_complete);
  d::PackOptions again = o;
  again.in = o.out;
  again.out = dir.file("out2");
  EXPECT_THROW(d::pack_data_set(again), joule::UsageError);
}

namespace {

// One variable-length dataset as h5py writes NVIDIA's packed shards (int16 in the file).
void write_ragged(hid_t file, const char* name, const std::vector<std::vector<int32_t>>& rows) {
  std::vector<hvl_t> raw(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) raw[i] = {rows[i].size(), const_cast<int32_t*>(rows[i].data())};
  d::Hdf5Handle file_type(H5Tvlen_create(H5T_STD_I16LE)), memory_type(H5Tvlen_create(H5T_NATIVE_INT32));
  const hsize_t n = rows.size();
  d::Hdf5Handle space(H5Screate_simple(1, &n, nullptr));
  d::Hdf5Handle ds(H5Dcreate2(file, name, file_type.get(), space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  ASSERT_TRUE(ds.valid());
  ASSERT_GE(H5Dwrite(ds.get(), memory_type.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, raw.data()), 0);
}

// Two packs: [CLS] a a [SEP] b [SEP] + [CLS] c [SEP] d [SEP] (6 + 5 tokens), and one sequence of 7.
void write_nvidia_packed(const std::string& path, int32_t first_length = 6) {
  d::Hdf5Handle f(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  write_ragged(f.get(), "input_ids", {{2, 10, 11, 3, 12, 3, 2, 13, 3, 14, 3}, {2, 15, 16, 17, 3, 18, 3}});
  write_ragged(f.get(), "segment_ids", {{0, 0, 0, 0, 1, 1, 0, 0, 0, 1, 1}, {0, 0, 0, 0, 0, 1, 1}});
  write_ragged(f.get(), "masked_lm_positions", {{2, 7}, {1, 5, 6}});
  write_ragged(f.get(), "masked_lm_ids", {{20, 21}, {22, 23, 24}});
  write_ragged(f.get(), "next_sentence_labels", {{0, 1}, {1}});
  write_ragged(f.get(), "packed_input_len", {{first_length, 5}, {7}});
  write_ragged(f.get(), "packed_masked_lm_len", {{1, 1}, {2}});  // pack 1's lengths count 2 of its 3 predictions
}

}  // namespace

TEST(Pack, NvidiasMlperfPackedShardsConvertToJoulesLayout) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("nv"));
  write_nvidia_packed(dir.file("nv/output_00000.hdf5"));
  ASSERT_TRUE(d::is_nvidia_packed_shard(dir.file("nv/output_00000.hdf5")));
  d::PackOptions o;
  o.in = dir.file("nv");
  o.out = dir.file("out");
  o.seq_len = 16;
  o.max_predictions = 4;
  // Pack 1's packed_masked_lm_len counts 2 predictions of its 3: refused, naming the shard and the pack.
  try {
    d::pack_data_set(o);
    ADD_FAILURE() << "a pack whose lengths do not add up converted";
  } catch (const d::ShardError& e) {
    EXPECT_NE(std::string(e.what()).find("output_00000.hdf5: pack 1: "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("to 2 predictions of 3"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(o.out));

  // A well-formed pack 1 (masked lengths {3}) converts: rows as NVIDIA packed them, three sequences in two rows.
  {
    d::Hdf5Handle f(H5Fopen(dir.file("nv/output_00000.hdf5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT));
    H5Ldelete(f.get(), "packed_masked_lm_len", H5P_DEFAULT);
    write_ragged(f.get(), "packed_masked_lm_len", {{1, 1}, {3}});
  }
  d::HostBatch b = d::read_nvidia_packed(dir.file("nv/output_00000.hdf5"), 16, 3, 4);  // the reader alone
  EXPECT_EQ(b.rows, 2);
  EXPECT_EQ(b.sequences_in(0), 2);
  EXPECT_EQ(b.masked_positions[1], 7);  // offsets into the pack, as NVIDIA writes them
  try {
    d::read_nvidia_packed(dir.file("nv/output_00000.hdf5"), 10, 3, 4);
    ADD_FAILURE() << "an 11-token pack fit a row of 10";
  } catch (const d::ShardError& e) {
    EXPECT_NE(std::string(e.what()).find("pack 0: 11 tokens, more than a row's 10"), std::string::npos) << e.what();
  }

  const d::PackSummary s = d::pack_data_set(o);
  EXPECT_EQ(s.rows_after, 2);
  EXPECT_EQ(s.sequences, 3);
  const d::Dataset packed = d::Dataset::open(d::data_create_split(o.out, "train"), {0, false});
  EXPECT_EQ(packed.pack(), 3);
  EXPECT_EQ(packed.sequences(), 3);
  EXPECT_EQ(packed.seq_len(), 16);
  const d::PretrainingBatch t = d::Loader::to_tensors(d::read_sequences(packed, {0, 1}));
  EXPECT_EQ(t.sequence_count(), 3);
  EXPECT_EQ(t.input_ids[0][6].item<int64_t>(), 2);  // the second sequence's [CLS]
  EXPECT_EQ(t.next_sentence_labels[0][1].item<int64_t>(), 1);
}
