// `joule data vocab` and `joule data synth`: a WordPiece vocabulary learned from a corpus, and a
// deterministic synthetic English-like corpus, so no download is ever needed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace joule::data {

struct VocabBuildOptions {
  std::vector<std::string> inputs;
  int64_t size = 8000;  // including the special tokens
  bool lower_case = true;
  int64_t min_frequency = 2;  // a merge must occur at least this often
  int threads = 0;
  bool skip_bad_input = false;  // as data create's: bad lines, documents and empty files are skipped, not an error
  // As reading advances: the input bytes done and of all (-1 for gzip input: unknown), for a progress line; may be
  // empty.
  std::function<void(int64_t input_bytes_done, int64_t of)> on_progress;
};

// [PAD] [UNK] [CLS] [SEP] [MASK], then every character seen (word-initial and "##" forms), then
// pieces learned by merging the most frequent adjacent pair (BPE-style training, WordPiece output).
// Deterministic: ties go to the lexicographically smaller merged piece.
Vocab build_vocab(const VocabBuildOptions& options);

struct SynthOptions {
  int64_t documents = 2000;
  uint64_t seed = 1;
};

// A synthetic corpus with structure a small model can learn: a fixed world of people with homes,
// jobs, ages, pets and favourite colours restated consistently across documents (with subject-verb
// agreement), simple arithmetic in words and orderings of days and months. One sentence per line,
// a blank line between documents. Deterministic in the seed. Returns the number of sentences.
int64_t write_synthetic_corpus(const std::string& path, const SynthOptions& options);

}  // namespace joule::data
