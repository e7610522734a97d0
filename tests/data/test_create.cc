// `joule data create`: round trip on a hand-written corpus, reference invariants, determinism.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <set>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/create.h"
#include "data/dataset.h"
#include "data/row_reader.h"
#include "data/vocab_builder.h"
#include "test_util.h"

using joule::test::TempDir;

namespace {

// Four documents whose sentences use distinct words, so every token tells where it came from.
const char* kCorpus =
    "alpha beta gamma delta.\n"
    "epsilon zeta eta theta.\n"
    "iota kappa lambda mu.\n"
    "\n"
    "red orange yellow green.\n"
    "blue indigo violet white.\n"
    "\n"
    "one two three four five.\n"
    "six seven eight nine ten.\n"
    "eleven twelve thirteen fourteen.\n"
    "\n"
    "north south east west.\n"
    "up down left right.\n";

std::string write_inputs(const TempDir& dir) {
  joule::test::write_file(dir.file("corpus.txt"), kCorpus);
  std::string vocab = "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n.\n";
  std::string text = kCorpus;
  for (char& c : text) c = (c == '.' || c == '\n') ? ' ' : c;
  std::istringstream words(text);
  std::string w;
  while (words >> w) vocab += w + "\n";
  joule::test::write_file(dir.file("vocab.txt"), vocab);
  return dir.file("corpus.txt");
}

joule::data::CreateOptions options(const TempDir& dir, const std::string& out) {
  joule::data::CreateOptions o;
  o.inputs = {dir.file("corpus.txt")};
  o.vocab = dir.file("vocab.txt");
  o.out = dir.file(out);
  o.seq_len = 24;
  o.max_predictions = 4;
  o.dupe_factor = 3;
  o.shard_mb = 100.0 / (1 << 20);  // 100 bytes of input per chunk: two chunks of two documents
  o.seed = 9;
  return o;
}

}  // namespace

TEST(Create, RoundTripKeepsTheReferenceInvariants) {
  TempDir dir;
  write_inputs(dir);
  const auto o = options(dir, "out");
  const auto summary = joule::data::create_pretraining_data(o);
  ASSERT_GT(summary.train_sequences, 8);
  EXPECT_EQ(summary.train_shards.size(), 2u);
  const auto vocab = joule::data::Vocab::load(dir.file("out/vocab.txt"));
  const auto meta = nlohmann::json::parse(joule::test::read_file(dir.file("out/metadata.json")));
  EXPECT_EQ(meta["vocab_size"], vocab.size());
  EXPECT_EQ(meta["train_sequences"], summary.train_sequences);
  EXPECT_EQ(meta["seq_len"], 24);

  // The sentences of each document, as ids, to check where segments come from.
  std::vector<std::vector<int32_t>> documents;
  {
    joule::data::FullTokenizer tok(vocab, true);
    std::istringstream in(kCorpus);
    std::string line;
    documents.emplace_back();
    while (std::getline(in, line)) {
      if (line.empty()) {
        documents.emplace_back();
        continue;
      }
      auto ids = tok.to_ids(tok.tokenize(line));
      documents.back().insert(documents.back().end(), ids.begin(), ids.end());
    }
  }
  auto document_of = [&](int32_t id) {
    for (size_t d = 0; d < documents.size(); ++d)
      if (std::find(documents[d].begin(), documents[d].end(), id) != documents[d].end() && id != vocab.id("."))
        return static_cast<int>(d);
    return -1;
  };

  auto data = joule::data::Dataset::open(dir.file("out/train"), {vocab.size(), true});
  std::vector<uint64_t> all(static_cast<size_t>(data.size()));
  std::iota(all.begin(), all.end(), 0);
  const auto b = joule::data::read_sequences(data, all);
  int64_t masked_total = 0, mask_token = 0, random_next = 0;
  for (int64_t r = 0; r < b.rows; ++r) {
    SCOPED_TRACE("sequence " + std::to_string(r));
    std::vector<int32_t> tokens, segments;
    for (int64_t i = 0; i < b.seq_len && b.input_mask[r * b.seq_len + i]; ++i) {
      tokens.push_back(b.input_ids[r * b.seq_len + i]);
      segments.push_back(b.segment_ids[r * b.seq_len + i]);
    }
    // Undo the masking with the stored labels.
    std::vector<int32_t> original = tokens;
    int64_t used = 0, last = 0;
    for (int64_t k = 0; k < b.max_predictions; ++k) {
      const int32_t pos = b.masked_positions[r * b.max_predictions + k];
      if (pos == 0) break;
      ASSERT_GT(pos, last) << "positions sorted and unique";
      ASSERT_LT(pos, static_cast<int32_t>(tokens.size()));
      last = pos;
      mask_token += tokens[static_cast<size_t>(pos)] == vocab.mask_id();
      original[static_cast<size_t>(pos)] = b.masked_ids[r * b.max_predictions + k];
      ++used;
    }
    const int64_t expected =
        std::min<int64_t>(o.max_predictions, std::max<int64_t>(1, std::llround(tokens.size() * 0.15)));
    EXPECT_EQ(used, expected);
    masked_total += used;
    // [CLS] A [SEP] B [SEP], segment 0 through the first [SEP], 1 after.
    ASSERT_EQ(original.front(), vocab.cls_id());
    ASSERT_EQ(original.back(), vocab.sep_id());
    const auto first_sep = std::find(original.begin() + 1, original.end(), vocab.sep_id());
    ASSERT_NE(first_sep, original.end() - 1);
    EXPECT_EQ(std::count(original.begin(), original.end(), vocab.sep_id()), 2);
    const size_t a_end = static_cast<size_t>(first_sep - original.begin());
    for (size_t i = 0; i < segments.size(); ++i) EXPECT_EQ(segments[i], i <= a_end ? 0 : 1) << i;
    EXPECT_LE(static_cast<int64_t>(tokens.size()), o.seq_len);
    // Segment B comes from A's document exactly when the label says "is next".
    int doc_a = -1, doc_b = -1;
    for (size_t i = 1; i < a_end && doc_a < 0; ++i) doc_a = document_of(original[i]);
    for (size_t i = a_end + 1; i + 1 < original.size() && doc_b < 0; ++i) doc_b = document_of(original[i]);
    const bool random = b.next_sentence_labels[r] == 1;
    random_next += random;
    if (doc_a >= 0 && doc_b >= 0) {
      if (!random)
        EXPECT_EQ(doc_a, doc_b);
      else
        EXPECT_NE(doc_a, doc_b);
    }
  }
  EXPECT_GT(mask_token, masked_total / 2);  // 80 % become [MASK]
  EXPECT_GT(random_next, 0);
  EXPECT_LT(random_next, b.rows);
}

TEST(Create, SameSeedSameBytesWhateverTheThreadsOtherSeedOtherMasks) {
  TempDir dir;
  write_inputs(dir);
  auto a = options(dir, "a"), b = options(dir, "b"), c = options(dir, "c");
  a.threads = 1;
  b.threads = 2;
  c.seed = 10;
  joule::data::create_pretraining_data(a);
  joule::data::create_pretraining_data(b);
  joule::data::create_pretraining_data(c);
  for (const char* shard : {"train/part_00000.hdf5", "train/part_00001.hdf5"})
    EXPECT_EQ(joule::test::read_file(dir.file(std::string("a/") + shard)),
              joule::test::read_file(dir.file(std::string("b/") + shard)))
        << shard;
  EXPECT_NE(joule::test::read_file(dir.file("a/train/part_00000.hdf5")),
            joule::test::read_file(dir.file("c/train/part_00000.hdf5")));
}

TEST(Create, HeldOutEvalShardAndBadOptions) {
  TempDir dir;
  write_inputs(dir);
  auto o = options(dir, "e");
  o.shard_mb = 0;
  o.shards = 1;  // one chunk: the eval documents come from the first
  o.eval_documents = 2;
  const auto s = joule::data::create_pretraining_data(o);
  EXPECT_EQ(s.documents, 2);
  EXPECT_EQ(s.eval_shards.size(), 1u);
  EXPECT_GT(s.eval_sequences, 0);
  EXPECT_EQ(joule::data::Dataset::open(dir.file("e/eval")).size(), s.eval_sequences);

  auto bad = options(dir, "x");
  bad.shard_mb = 0;
  bad.shards = 1;
  bad.eval_documents = 3;  // leaves one training document: no NSP pairs
  EXPECT_THROW(joule::data::create_pretraining_data(bad), joule::UsageError);
  bad = options(dir, "y");
  bad.vocab = dir.file("missing-vocab.txt");
  EXPECT_THROW(joule::data::create_pretraining_data(bad), joule::data::VocabError);
}

TEST(Create, WholeWordMaskingMasksEveryPieceOfAWord) {
  joule::data::Vocab vocab = joule::data::Vocab::from_tokens(
      {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "un", "##aff", "##able", "word"}, "t");
  std::vector<bool> cont = {false, false, false, false, false, false, true, true, false};
  joule::data::CreateOptions o;
  o.whole_word_mask = true;
  o.max_predictions = 3;
  o.masked_lm_prob = 0.5;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    joule::data::Instance inst;
    inst.tokens = {2, 5, 6, 7, 8, 3};  // [CLS] un ##aff ##able word [SEP]
    joule::data::Rng rng(seed);
    joule::data::mask_instance(inst, o, vocab, cont, rng);
    std::vector<int32_t> p = inst.masked_positions;
    const bool has_piece =
        std::count(p.begin(), p.end(), 1) + std::count(p.begin(), p.end(), 2) + std::count(p.begin(), p.end(), 3);
    if (has_piece)
      EXPECT_EQ(p, (std::vector<int32_t>{1, 2, 3})) << "seed " << seed;
    else
      EXPECT_EQ(p, (std::vector<int32_t>{4})) << "seed " << seed;
  }
}

TEST(Vocab, BuiltVocabularyCoversTheCorpusWithoutUnknowns) {
  TempDir dir;
  joule::data::SynthOptions s;
  s.documents = 200;
  joule::data::write_synthetic_corpus(dir.file("c.txt"), s);
  joule::data::SynthOptions s2 = s;
  joule::data::write_synthetic_corpus(dir.file("c2.txt"), s2);
  EXPECT_EQ(joule::test::read_file(dir.file("c.txt")), joule::test::read_file(dir.file("c2.txt")));  // deterministic

  joule::data::VocabBuildOptions v;
  v.inputs = {dir.file("c.txt")};
  v.size = 400;
  const auto vocab = joule::data::build_vocab(v);
  EXPECT_LE(vocab.size(), 400);
  EXPECT_EQ(vocab.token(0), "[PAD]");
  EXPECT_EQ(vocab.token(4), "[MASK]");
  joule::data::FullTokenizer tok(vocab, true);
  std::istringstream in(joule::test::read_file(dir.file("c.txt")));
  std::string line;
  int64_t tokens = 0, words = 0;
  while (std::getline(in, line)) {
    for (const auto& t : tok.tokenize(line)) {
      EXPECT_NE(t, "[UNK]") << line;
      ++tokens;
    }
    words += static_cast<int64_t>(joule::data::basic_tokenize(line, true).size());
  }
  EXPECT_LT(tokens, words * 2);  // merges learned real pieces, not just characters
  EXPECT_EQ(joule::data::build_vocab(v).tokens(), vocab.tokens());
}

TEST(Create, AShardSetKnowsItsVocabularyItsInputsAndItsContent) {
  TempDir dir;
  write_inputs(dir);
  auto made = options(dir, "out");
  made.shard_mb = 0;
  made.shards = 1;  // one chunk of four documents: two held out
  made.eval_documents = 2;
  joule::data::create_pretraining_data(made);
  const auto train = joule::data::Dataset::open(dir.file("out/train"));
  const auto eval = joule::data::Dataset::open(dir.file("out/eval"));
  ASSERT_TRUE(train.created_by());
  EXPECT_EQ(train.created_by()->split, "train");
  ASSERT_EQ(train.created_by()->inputs.size(), 1u);
  const auto expect_error = [](const std::function<void()>& call, const std::vector<std::string>& parts) {
    try {
      call();
      ADD_FAILURE() << "no error; expected one with " << parts.front();
    } catch (const joule::data::ShardError& e) {
      for (const std::string& part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };

  // The vocabulary the shards were made with (or a copy of it) is accepted; another one, a word longer, is not.
  EXPECT_NO_THROW(joule::data::check_vocab_file(train, dir.file("vocab.txt")));
  EXPECT_NO_THROW(joule::data::check_vocab_file(eval, dir.file("out/vocab.txt")));
  joule::test::write_file(dir.file("other_vocab.txt"), joule::test::read_file(dir.file("vocab.txt")) + "extra\n");
  expect_error([&] { joule::data::check_vocab_file(train, dir.file("other_vocab.txt")); },
               {"other_vocab.txt: not the vocabulary the shards of", "metadata.json records vocab_fnv1a64"});

  // The held-out split of one data set is disjoint by document: accepted. Training shards as eval shards are not.
  EXPECT_NO_THROW(joule::data::check_held_out(train, eval));
  expect_error([&] { joule::data::check_held_out(train, train); },
               {"eval shard ", "part_00000.hdf5 has the content of training shard"});

  // A second data set made from the same text (another seed, so other shards): its eval documents are trained on.
  auto again = made;
  again.out = dir.file("again");
  again.seed = 10;
  joule::data::create_pretraining_data(again);
  const auto again_eval = joule::data::Dataset::open(dir.file("again/eval"));
  expect_error([&] { joule::data::check_held_out(train, again_eval); },
               {"were both made from ", "corpus.txt", "again/metadata.json"});

  // A shard replaced after data create made it (by the same-named shard of the other data set) is found by its
  // checksum, even with its cached validation gone.
  std::filesystem::copy_file(dir.file("again/train/part_00000.hdf5"), dir.file("out/train/part_00000.hdf5"),
                             std::filesystem::copy_options::overwrite_existing);
  expect_error([&] { joule::data::Dataset::open(dir.file("out/train")); },
               {"out/train/part_00000.hdf5: its content (checksum ", "was edited or replaced after it was made"});
}

// --pack: the same sequences as the padded data set (each one's tokens, masks and label), packed rows that validate,
// the same bytes whatever the threads, and metadata that counts rows and sequences apart.
TEST(Create, PackedDataSetHoldsThePaddedSequencesInFewerRows) {
  TempDir dir;
  write_inputs(dir);
  auto padded = options(dir, "padded"), packed = options(dir, "packed"), packed2 = options(dir, "packed2");
  for (auto* o : {&padded, &packed, &packed2}) o->seq_len = 64;  // the documents' pairs fill a fraction of it
  packed.pack = packed2.pack = 3;
  packed2.threads = 2;
  const auto p = joule::data::create_pretraining_data(padded);
  const auto q = joule::data::create_pretraining_data(packed);
  joule::data::create_pretraining_data(packed2);
  EXPECT_EQ(q.train_sequences, p.train_sequences);
  EXPECT_EQ(q.masked_predictions, p.masked_predictions);
  EXPECT_LT(q.train_rows, p.train_rows);
  EXPECT_EQ(joule::test::read_file(dir.file("packed/train/part_00001.hdf5")),
            joule::test::read_file(dir.file("packed2/train/part_00001.hdf5")));
  const auto meta = nlohmann::json::parse(joule::test::read_file(dir.file("packed/metadata.json")));
  EXPECT_EQ(meta["train_rows"], q.train_rows);
  EXPECT_EQ(meta["train_sequences"], q.train_sequences);
  EXPECT_EQ(meta["arguments"]["pack"], 3);

  // Every sequence of the padded shards is in the packed ones, whole: compare the multisets of (tokens, label).
  auto sequences_of = [](const std::string& shard) {
    std::multiset<std::pair<std::vector<int32_t>, int32_t>> out;
    joule::data::HostBatch b;
    joule::data::ShardReader reader(shard);
    reader.read_range(0, reader.sequences(), b);
    for (int64_t r = 0; r < b.rows; ++r) {
      int64_t at = 0;
      for (int64_t k = 0; k < b.sequences_in(r); ++k) {
        const int64_t n = b.pack > 0 ? b.sequence_lengths[r * b.pack + k]
                                     : std::count(b.input_mask.begin() + r * b.seq_len,
                                                  b.input_mask.begin() + (r + 1) * b.seq_len, 1);
        std::vector<int32_t> tokens(b.input_ids.begin() + r * b.seq_len + at,
                                    b.input_ids.begin() + r * b.seq_len + at + n);
        out.emplace(tokens, b.next_sentence_labels[r * b.labels_per_row() + k]);
        at += n;
      }
    }
    return out;
  };
  for (const char* shard : {"train/part_00000.hdf5", "train/part_00001.hdf5"}) {
    EXPECT_EQ(joule::data::validate_shard(dir.file(std::string("packed/") + shard)).pack, 3);
    EXPECT_EQ(sequences_of(dir.file(std::string("packed/") + shard)),
              sequences_of(dir.file(std::string("padded/") + shard)))
        << shard;
  }
  const joule::data::Dataset train = joule::data::Dataset::open(dir.file("packed/train"), {0, false});
  EXPECT_EQ(train.sequences(), q.train_sequences);
  EXPECT_EQ(train.size(), q.train_rows);
}
