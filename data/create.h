// `joule data create`: raw text (one sentence per line, blank line between documents) + vocab.txt
// -> pretraining shards, following Google's create_pretraining_data.py (the input NVIDIA's scripts
// use): NSP pairs with a 50 % random next segment from another document, short sequences with
// probability 0.1, truncation from a random end, 15 % masking with 80/10/10, optional whole-word
// masking, a dupe factor. Seeded and byte-for-byte deterministic whatever the thread count.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace joule::data {

// A small, fast, portable generator (splitmix64) with Python-random-like helpers, so results do not
// depend on the standard library's distributions.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next_u64();
  double uniform();                          // [0, 1)
  int64_t randint(int64_t low, int64_t high);  // inclusive, unbiased
  template <typename T>
  void shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[static_cast<size_t>(randint(0, static_cast<int64_t>(i) - 1))]);
  }

 private:
  uint64_t state_;
};
uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c = 0);

struct Instance {
  std::vector<int32_t> tokens;  // [CLS] a [SEP] b [SEP], after masking
  std::vector<int32_t> segment_ids;
  std::vector<int32_t> masked_positions, masked_ids;  // sorted by position
  bool is_random_next = false;
};

struct CreateOptions {
  std::vector<std::string> inputs;  // text files
  std::string vocab;                // vocab.txt
  std::string out;                  // output directory
  int seq_len = 128;
  int max_predictions = 20;
  int dupe_factor = 5;
  int shards = 1;
  uint64_t seed = 12345;
  bool lower_case = true;
  bool whole_word_mask = false;
  double masked_lm_prob = 0.15;
  double short_seq_prob = 0.1;
  int64_t eval_documents = 0;  // documents held out (after the shuffle) for one eval shard
  int threads = 0;             // 0: all cores
  bool replace = false;        // replace a non-empty `out` (written beside it, swapped in when complete)
};

struct CreateSummary {
  int64_t documents = 0, eval_documents = 0;
  int64_t train_sequences = 0, eval_sequences = 0;
  int64_t masked_predictions = 0, tokens = 0;
  std::vector<std::string> train_shards, eval_shards;
};

// Writes OUT/train/part_NNNNN.hdf5, OUT/eval/part_00000.hdf5 (with eval_documents > 0), OUT/vocab.txt
// and OUT/metadata.json. A non-empty OUT is refused unless `replace`: the data set is written into OUT.partial-PID and
// renamed to OUT only when complete (a replaced OUT is removed after the swap), so OUT never mixes two data sets.
CreateSummary create_pretraining_data(const CreateOptions& options);

// The pieces, exposed for tests.
using Document = std::vector<std::vector<int32_t>>;  // sentences of token ids
std::vector<Instance> instances_from_document(const std::vector<Document>& documents, size_t index,
                                              const CreateOptions& options, const Vocab& vocab,
                                              const std::vector<bool>& is_continuation, Rng& rng);
void mask_instance(Instance& instance, const CreateOptions& options, const Vocab& vocab,
                   const std::vector<bool>& is_continuation, Rng& rng);

}  // namespace joule::data
