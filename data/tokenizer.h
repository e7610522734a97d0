// BERT tokenization, token for token as Google's reference tokenization.py (FullTokenizer):
// BasicTokenizer (clean text, split CJK characters, optional lower-casing with accent stripping,
// punctuation split) then greedy longest-match-first WordPiece with "##" continuations and [UNK].
// Unicode categories, full lower-casing and NFD come from ICU. No LibTorch here.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "launch/util/error.h"

namespace joule::data {

class VocabError : public joule::Error {
 public:
  explicit VocabError(const std::string& message,
                      std::string hint = "point data.vocab (--vocab) at the vocab.txt the shards were made with")
      : joule::Error(message, std::move(hint)) {}
};

class Vocab {
 public:
  // vocab.txt: one token per line, its id the line number (as the reference's load_vocab).
  // Requires [PAD], [UNK], [CLS], [SEP] and [MASK]; the error names the file.
  static Vocab load(const std::string& path);
  static Vocab from_tokens(std::vector<std::string> tokens, const std::string& where);
  void save(const std::string& path) const;

  int32_t id(std::string_view token) const;  // -1 when absent
  const std::string& token(int32_t id) const { return tokens_.at(static_cast<size_t>(id)); }
  int64_t size() const { return static_cast<int64_t>(tokens_.size()); }
  const std::vector<std::string>& tokens() const { return tokens_; }
  int32_t pad_id() const { return pad_; }
  int32_t unk_id() const { return unk_; }
  int32_t cls_id() const { return cls_; }
  int32_t sep_id() const { return sep_; }
  int32_t mask_id() const { return mask_; }

 private:
  std::vector<std::string> tokens_;
  std::unordered_map<std::string, int32_t> ids_;
  int32_t pad_ = -1, unk_ = -1, cls_ = -1, sep_ = -1, mask_ = -1;
};

// Whitespace-separated words after cleaning, CJK splitting, lower-casing/accent stripping and
// punctuation splitting.
std::vector<std::string> basic_tokenize(std::string_view text, bool lower_case);

// WordPiece on one word: its pieces, or {unk} when any part cannot be matched or the word has more
// than `max_chars` code points.
std::vector<std::string> wordpiece_tokenize(const std::string& word, const Vocab& vocab, int max_chars = 200);

class FullTokenizer {
 public:
  FullTokenizer(const Vocab& vocab, bool lower_case);
  std::vector<std::string> tokenize(std::string_view text) const;
  std::vector<int32_t> to_ids(const std::vector<std::string>& tokens) const;
  // Appends the ids of `text` to `out`: exactly to_ids(tokenize(text)), without a string per token. Text between
  // ASCII whitespace that is all ASCII takes a byte loop and a hash lookup on the word's bytes (no substring is
  // built); only runs holding other characters go through ICU.
  void encode(std::string_view text, std::vector<int32_t>& out) const;
  const Vocab& vocab() const { return *vocab_; }

 private:
  class PieceIndex;
  void encode_ascii_run(std::string_view run, std::string& word, std::vector<int32_t>& out) const;
  void wordpiece_ids(std::string_view word, bool ascii, std::vector<int32_t>& out) const;

  const Vocab* vocab_;
  bool lower_case_;
  std::shared_ptr<const PieceIndex> index_;  // shared: copies of a tokenizer share one index
};

// True for the characters Python's str.split() splits on (the reference's whitespace_tokenize).
bool is_python_whitespace(char32_t c);
bool is_punctuation(char32_t c);
std::u32string utf8_to_u32(std::string_view s);  // invalid bytes are dropped (errors="ignore")
std::string u32_to_utf8(std::u32string_view s);

}  // namespace joule::data
