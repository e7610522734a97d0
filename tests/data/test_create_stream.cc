// `joule data create` streaming: NSP pairs drawn from the chunk's other documents, output independent of the worker
// count, resumption of a killed run, and refusal to mix data sets.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <numeric>
#include <set>

#include <nlohmann/json.hpp>

#include "data/create.h"
#include "data/data_error.h"
#include "data/dataset.h"
#include "data/row_reader.h"
#include "test_util.h"

using joule::test::TempDir;

namespace {

// Documents whose every word names its document ("d12" ... "d12"): a token tells which document it came from.
// 40-44 sentences each, so that few NSP chunks are a document's lone last segment (always random, as in Google's
// script).
void write_corpus(const TempDir& dir, int documents) {
  std::string text, vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n.\n";
  for (int d = 0; d < documents; ++d) {
    vocab += "d" + std::to_string(d) + "\n";
    for (int s = 0; s < 40 + d % 5; ++s) {
      for (int w = 0; w < 6 + (d + s) % 7; ++w) text += "d" + std::to_string(d) + " ";
      text += ".\n";
    }
    text += "\n";
  }
  joule::test::write_file(dir.file("corpus.txt"), text);
  joule::test::write_file(dir.file("vocab.txt"), vocab);
}

joule::data::CreateOptions options(const TempDir& dir, const std::string& out) {
  joule::data::CreateOptions o;
  o.inputs = {dir.file("corpus.txt")};
  o.vocab = dir.file("vocab.txt");
  o.out = dir.file(out);
  o.seq_len = 32;
  o.max_predictions = 5;
  o.dupe_factor = 2;
  o.shard_mb = 16384.0 / (1 << 20);  // 16 KB of text per chunk
  o.seed = 3;
  return o;
}

// The document a segment's tokens name (-1: none, only [MASK]/random/"." tokens), from the unmasked tokens.
int document_of(const joule::data::HostBatch& b, int64_t row, bool segment_b, const joule::data::Vocab& vocab) {
  std::map<int, int> votes;
  std::vector<int32_t> original(b.input_ids.begin() + row * b.seq_len, b.input_ids.begin() + (row + 1) * b.seq_len);
  for (int64_t k = 0; k < b.max_predictions && b.masked_positions[row * b.max_predictions + k] > 0; ++k)
    original[b.masked_positions[row * b.max_predictions + k]] = b.masked_ids[row * b.max_predictions + k];
  for (int64_t i = 1; i < b.seq_len && b.input_mask[row * b.seq_len + i]; ++i) {
    if ((b.segment_ids[row * b.seq_len + i] == 1) != segment_b) continue;
    const std::string& t = vocab.token(original[static_cast<size_t>(i)]);
    if (t.size() > 1 && t[0] == 'd') ++votes[std::stoi(t.substr(1))];
  }
  return votes.empty() ? -1 : votes.begin()->first;
}

}  // namespace

TEST(CreateStream, RandomNextComesFromAnotherDocumentOfTheSameChunkHalfTheTime) {
  TempDir dir;
  write_corpus(dir, 60);
  const auto o = options(dir, "out");
  const auto summary = joule::data::create_pretraining_data(o);
  ASSERT_GE(summary.train_shards.size(), 4u) << "the test needs several chunks";
  const auto vocab = joule::data::Vocab::load(dir.file("out/vocab.txt"));
  int64_t random = 0, rows = 0;
  std::set<int> seen_documents;
  for (const std::string& shard : summary.train_shards) {
    SCOPED_TRACE(shard);
    auto data = joule::data::Dataset::open(shard);
    std::vector<uint64_t> all(static_cast<size_t>(data.size()));
    std::iota(all.begin(), all.end(), 0);
    const auto b = joule::data::read_sequences(data, all);
    std::set<int> a_documents, b_documents;
    for (int64_t r = 0; r < b.rows; ++r) {
      const int a = document_of(b, r, false, vocab), other = document_of(b, r, true, vocab);
      ASSERT_GE(a, 0);
      ASSERT_GE(other, 0);
      const bool is_random = b.next_sentence_labels[r] == 1;
      if (is_random)
        EXPECT_NE(a, other) << "row " << r << ": a random segment from its own document";
      else
        EXPECT_EQ(a, other) << "row " << r;
      random += is_random;
      ++rows;
      a_documents.insert(a);
      b_documents.insert(other);
    }
    // The pool is the chunk: every segment B comes from a document this shard's segments A come from.
    for (int d : b_documents) EXPECT_TRUE(a_documents.count(d)) << "document " << d << " drawn from outside the chunk";
    for (int d : a_documents) EXPECT_TRUE(seen_documents.insert(d).second) << "document " << d << " in two chunks";
  }
  EXPECT_EQ(seen_documents.size(), 60u);
  EXPECT_EQ(rows, summary.train_sequences);
  EXPECT_EQ(random, summary.random_next);
  // Half, plus the chunks of a single segment (always random, as in Google's script): a few percent here.
  const double fraction = static_cast<double>(random) / static_cast<double>(rows);
  EXPECT_GT(fraction, 0.47);
  EXPECT_LT(fraction, 0.56);
}

TEST(CreateStream, SameBytesWhateverTheWorkersAndGzipInputReadsTheSame) {
  TempDir dir;
  write_corpus(dir, 40);
  auto one = options(dir, "one"), two = options(dir, "two");
  one.threads = 1;
  two.threads = 2;
  const auto a = joule::data::create_pretraining_data(one);
  const auto b = joule::data::create_pretraining_data(two);
  ASSERT_EQ(a.train_shards.size(), b.train_shards.size());
  ASSERT_GE(a.train_shards.size(), 3u);
  for (size_t i = 0; i < a.train_shards.size(); ++i)
    EXPECT_EQ(joule::test::read_file(a.train_shards[i]), joule::test::read_file(b.train_shards[i]))
        << a.train_shards[i];
  auto meta = [&](const std::string& out) {
    auto j = nlohmann::json::parse(joule::test::read_file(dir.file(out + "/metadata.json")));
    return j;
  };
  EXPECT_EQ(meta("one")["chunks"], meta("two")["chunks"]);  // shard checksums and counts
  EXPECT_EQ(meta("one")["train_sequences"], a.train_sequences);
  EXPECT_EQ(meta("one")["chunks"][0]["train"]["file"], "train/part_00000.hdf5");
  EXPECT_FALSE(std::filesystem::exists(dir.file("one.partial")));
  // The corpus gzip-compressed, in a directory: the same chunks (cut by uncompressed bytes), the same shards.
  std::filesystem::create_directories(dir.file("gz"));
  ASSERT_EQ(std::system(("gzip -c " + dir.file("corpus.txt") + " > " + dir.file("gz/corpus.txt.gz")).c_str()), 0);
  auto gz = options(dir, "gz-out");
  gz.inputs = {dir.file("gz")};
  const auto c = joule::data::create_pretraining_data(gz);
  ASSERT_EQ(c.train_shards.size(), a.train_shards.size());
  for (size_t i = 0; i < a.train_shards.size(); ++i)
    EXPECT_EQ(joule::test::read_file(a.train_shards[i]), joule::test::read_file(c.train_shards[i]))
        << c.train_shards[i];
}

TEST(CreateStream, AKilledRunResumesKeepingVerifiedShardsAndEndsWithTheSameBytes) {
  TempDir dir;
  write_corpus(dir, 40);
  const auto whole = joule::data::create_pretraining_data(options(dir, "whole"));
  ASSERT_GE(whole.train_shards.size(), 4u);

  // What a run killed during its fourth chunk leaves: OUT.partial with three recorded shards, a half-written
  // shard's temporary file, and the second shard damaged since (it must be made again, and everything after it).
  auto o = options(dir, "resumed");
  joule::data::create_pretraining_data(o);
  std::filesystem::rename(dir.file("resumed"), dir.file("resumed.partial"));
  auto progress = nlohmann::json::parse(joule::test::read_file(dir.file("resumed.partial/metadata.json")));
  progress = {{"format", "joule-data-create-progress"},
              {"arguments", progress["arguments"]},
              {"chunks", {progress["chunks"][0], progress["chunks"][1], progress["chunks"][2]}}};
  joule::test::write_file(dir.file("resumed.partial/progress.json"), progress.dump());
  std::filesystem::remove(dir.file("resumed.partial/metadata.json"));
  std::filesystem::rename(dir.file("resumed.partial/train/part_00003.hdf5"),
                          dir.file("resumed.partial/train/part_00003.hdf5.tmp"));
  {
    std::fstream f(dir.file("resumed.partial/train/part_00001.hdf5"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(4000);
    const char byte = static_cast<char>(f.get());
    f.seekp(4000);
    f.put(static_cast<char>(byte ^ 0x5a));
  }
  const auto resumed = joule::data::create_pretraining_data(o);
  EXPECT_EQ(resumed.resumed_chunks, 1);  // chunk 0 kept; chunk 1 failed its checksum
  for (size_t i = 0; i < whole.train_shards.size(); ++i)
    EXPECT_EQ(joule::test::read_file(whole.train_shards[i]), joule::test::read_file(resumed.train_shards[i])) << i;
  EXPECT_FALSE(std::filesystem::exists(dir.file("resumed/train/part_00003.hdf5.tmp")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("resumed/progress.json")));

  // Run again with the same arguments: nothing to do.
  EXPECT_TRUE(joule::data::create_pretraining_data(o).already_complete);
}

TEST(CreateStream, AnOutputOfOtherArgumentsIsRefusedNamingThem) {
  TempDir dir;
  write_corpus(dir, 20);
  joule::data::create_pretraining_data(options(dir, "out"));
  auto other = options(dir, "out");
  other.seed = 4;
  try {
    joule::data::create_pretraining_data(other);
    FAIL() << "a data set of other arguments must be refused";
  } catch (const joule::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("holds a data set made with other arguments (seed: 4 now, 3 there)"),
              std::string::npos)
        << e.what();
  }
  // The same for a partial data set of other arguments.
  std::filesystem::create_directories(dir.file("p.partial"));
  joule::test::write_file(dir.file("p.partial/progress.json"),
                          R"({"arguments": {"seed": 1}, "chunks": [{"index": 0}]})");
  auto p = options(dir, "p");
  EXPECT_THROW(joule::data::create_pretraining_data(p), joule::UsageError);
  p.replace = true;  // discards it
  EXPECT_GT(joule::data::create_pretraining_data(p).train_sequences, 0);
  other.replace = true;
  EXPECT_GT(joule::data::create_pretraining_data(other).train_sequences, 0);
  EXPECT_EQ(nlohmann::json::parse(joule::test::read_file(dir.file("out/metadata.json")))["arguments"]["seed"], 4);
}

TEST(CreateStream, BudgetsTooSmallAndShardsOfGzipInputAreRefused) {
  TempDir dir;
  write_corpus(dir, 10);
  auto o = options(dir, "out");
  o.shard_mb = 0;
  o.memory_budget = 64 << 20;
  EXPECT_THROW(joule::data::create_pretraining_data(o), joule::UsageError);
  o.memory_budget = 2ll << 30;
  o.shard_mb = 4096;  // 4 GB chunks do not fit 2 GB
  EXPECT_THROW(joule::data::create_pretraining_data(o), joule::UsageError);
}

TEST(CreateStream, BadInputStopsWithoutAnOutputAndTheFixedInputRunsWithoutReplace) {
  TempDir dir;
  write_corpus(dir, 20);
  const std::string good = joule::test::read_file(dir.file("corpus.txt"));
  joule::test::write_file(dir.file("corpus.txt"), "caf\xe9 latin-1.\n" + good);
  auto o = options(dir, "out");
  try {
    joule::data::create_pretraining_data(o);
    FAIL() << "invalid UTF-8 must stop the run";
  } catch (const joule::data::CorpusError& e) {
    EXPECT_NE(std::string(e.what()).find("corpus.txt:1: invalid UTF-8 at byte 4 (0xE9)"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(dir.file("out")));
  joule::test::write_file(dir.file("corpus.txt"), good);  // fixed: the failed run had completed no shard to keep
  EXPECT_GT(joule::data::create_pretraining_data(o).train_sequences, 0);
  // With --skip-bad-input the line is skipped and counted.
  joule::test::write_file(dir.file("corpus.txt"), "caf\xe9 latin-1.\n" + good);
  o.out = dir.file("skipped");
  o.skip_bad_input = true;
  const auto s = joule::data::create_pretraining_data(o);
  EXPECT_EQ(s.skipped, 1);
  EXPECT_NE(s.first_skip.find("corpus.txt:1: invalid UTF-8"), std::string::npos) << s.first_skip;
}

TEST(CreateStream, ADamagedProgressRecordIsMadeAgainNotAnError) {
  TempDir dir;
  write_corpus(dir, 20);
  const auto o = options(dir, "out");
  const auto whole = joule::data::create_pretraining_data(o);
  const std::string first_shard = joule::test::read_file(whole.train_shards[0]);
  std::filesystem::rename(dir.file("out"), dir.file("out.partial"));
  auto meta = nlohmann::json::parse(joule::test::read_file(dir.file("out.partial/metadata.json")));
  nlohmann::json first = meta["chunks"][0];
  first["train"].erase("bytes");  // a record without one of its keys
  joule::test::write_file(dir.file("out.partial/progress.json"),
                          nlohmann::json({{"arguments", meta["arguments"]}, {"chunks", {first}}}).dump());
  std::filesystem::remove(dir.file("out.partial/metadata.json"));
  const auto again = joule::data::create_pretraining_data(o);
  EXPECT_EQ(again.resumed_chunks, 0);
  EXPECT_EQ(again.train_sequences, whole.train_sequences);
  EXPECT_EQ(first_shard, joule::test::read_file(again.train_shards[0]));
}
