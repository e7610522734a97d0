// BERT's basic + WordPiece tokenizer on arbitrary bytes (invalid UTF-8 included), and vocab.txt loading
// from the same bytes: no crash; every piece is in the vocabulary or is [UNK].
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace d = joule::data;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const d::Vocab vocab =
      d::Vocab::from_tokens({"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "un", "##aff", "##able", "a", "##b",
                             "é", "中", "!", "##s", "run", "##ning"},
                            "fuzz vocab");
  const std::string text(reinterpret_cast<const char*>(data), size);
  for (bool lower : {true, false}) {
    for (const std::string& word : d::basic_tokenize(text, lower)) {
      if (word.empty()) std::abort();
      for (const std::string& piece : d::wordpiece_tokenize(word, vocab)) {
        if (vocab.id(piece) < 0) std::abort();
      }
    }
  }
  // The fast path gives the string path's ids.
  for (bool lower : {true, false}) {
    const d::FullTokenizer tok(vocab, lower);
    std::vector<int32_t> ids;
    tok.encode(text, ids);
    if (ids != tok.to_ids(tok.tokenize(text))) std::abort();
  }
  // The same bytes as a vocab.txt: either a vocabulary with the special tokens or VocabError.
  std::vector<std::string> tokens;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) tokens.push_back(line);
  try {
    const d::Vocab v = d::Vocab::from_tokens(tokens, "fuzz vocab.txt");
    if (v.unk_id() < 0 || v.mask_id() < 0) std::abort();
  } catch (const d::VocabError&) {
  }
  return 0;
}
