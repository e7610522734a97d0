// `joule data create`: raw text (one sentence per line, blank line between documents) + vocab.txt
// -> pretraining shards, following Google's create_pretraining_data.py (the input NVIDIA's scripts
// use): NSP pairs with a 50 % random next segment from another document, short sequences with
// probability 0.1, truncation from a random end, 15 % masking with 80/10/10, optional whole-word
// masking, a dupe factor. Seeded and byte-for-byte deterministic whatever the thread count.
//
// Streaming: the input is read in chunks of whole documents (bounded memory), and the random next segment comes from
// another document of the same chunk, as in NVIDIA's recipe, whose per-shard processes each draw from their own text
// shard; Google's script draws from the whole corpus. Each chunk is written as one shard, dupe after dupe (so memory
// holds one dupe's sequences), each dupe's sequences shuffled; shards in input order. The trainer's loader shuffles
// blocks of 64-row chunks globally across shards (data/shuffle.h), so of this order only which sequences share a
// block reaches training: a random sample of one dupe of the chunk's documents.
#pragma once

#include <cstdint>
#include <functional>
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
  double uniform();                            // [0, 1)
  int64_t randint(int64_t low, int64_t high);  // inclusive, unbiased
  uint64_t below(uint64_t n);                  // [0, n), unbiased, n > 0: Lemire's multiply-shift, no division
  template <typename T>
  void shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i)
      std::swap(v[i - 1], v[static_cast<size_t>(randint(0, static_cast<int64_t>(i) - 1))]);
  }

 private:
  uint64_t state_;
};
uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c = 0);

struct Instance {
  std::vector<int32_t> tokens;                        // [CLS] a [SEP] b [SEP], after masking
  int32_t segment_b = 0;                              // where segment B begins (segment ids: 0 before, 1 from here)
  std::vector<int32_t> masked_positions, masked_ids;  // sorted by position
  bool is_random_next = false;
};

struct CreateOptions {
  std::vector<std::string> inputs;  // files, directories, glob patterns, @LIST files; plain or gzip (data/text_input.h)
  std::string vocab;                // vocab.txt
  std::string out;                  // output directory
  int seq_len = 128;
  int max_predictions = 20;
  int dupe_factor = 5;
  // How the input is cut into chunks (each chunk: its own random-next pool and one training shard). shards > 0: into
  // that many chunks of equal input bytes (plain-text inputs only); else shard_mb > 0: input MB per chunk; else as
  // large as the memory budget allows, at most kDefaultChunkMb.
  int shards = 0;
  double shard_mb = 0;
  int64_t memory_budget = 2ll << 30;  // bytes of peak resident memory to stay under
  uint64_t seed = 12345;
  bool lower_case = true;
  bool whole_word_mask = false;
  double masked_lm_prob = 0.15;
  double short_seq_prob = 0.1;
  int64_t eval_documents = 0;  // documents of the first chunk held out (after its shuffle) for one eval shard
  int threads = 0;             // 0: all cores; the output does not depend on it
  bool replace = false;        // replace an `out` that holds another data set (swapped in when the new one is complete)
  bool skip_bad_input = false;  // skip and count bad lines, documents and empty files instead of stopping
  int pack = 0;  // > 0: each dupe's sequences packed up to `pack` a row (data/pack.h: packed shards); 0: padded rows
  // Called as the work advances with the input bytes done so far (whole chunks, and the share of the chunk at hand
  // that its tokenizing and dupes have covered) and of all (-1 for gzip input: unknown): a progress line's figures.
  // May be empty.
  std::function<void(int64_t input_bytes_done, int64_t of)> on_progress;
};
constexpr double kDefaultChunkMb = 256;

struct CreateSummary {
  int64_t documents = 0, eval_documents = 0;
  int64_t train_sequences = 0, eval_sequences = 0;
  int64_t train_rows = 0, eval_rows = 0;  // the shards' rows: the sequences unless packed
  int64_t masked_predictions = 0, tokens = 0, random_next = 0;
  int64_t input_bytes = 0, chunk_bytes = 0, chunks = 0, resumed_chunks = 0, skipped = 0;
  std::string first_skip;
  std::vector<std::string> notes;  // about an earlier run's damaged progress record
  bool already_complete = false;   // `out` already held this very data set: nothing was written
  std::vector<std::string> train_shards, eval_shards;
};

// Streams the input in chunks of whole documents and writes one shard per chunk as it completes:
// OUT/train/part_NNNNN.hdf5, OUT/eval/part_00000.hdf5 (with eval_documents > 0), OUT/vocab.txt and OUT/metadata.json
// (every shard with its sequence count and checksum, and the arguments that made them). The data set is built in
// OUT.partial and renamed to OUT only when complete; a rerun with the same arguments after a kill keeps the verified
// complete shards there and continues. Peak memory stays near options.memory_budget whatever the input size.
CreateSummary create_pretraining_data(const CreateOptions& options);

// The masking step, exposed for tests.
void mask_instance(Instance& instance, const CreateOptions& options, const Vocab& vocab,
                   const std::vector<bool>& is_continuation, Rng& rng);

}  // namespace joule::data
