#include "data/tokenizer.h"

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#include <unicode/utf8.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "launch/util/file_io.h"

namespace joule::data {
namespace {

bool is_reference_whitespace(char32_t c) {  // the reference's _is_whitespace
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || u_charType(static_cast<UChar32>(c)) == U_SPACE_SEPARATOR;
}

bool is_control(char32_t c) {  // the reference's _is_control
  if (c == '\t' || c == '\n' || c == '\r') return false;
  const int8_t t = u_charType(static_cast<UChar32>(c));
  return t == U_CONTROL_CHAR || t == U_FORMAT_CHAR;
}

bool is_cjk(char32_t c) {  // the CJK Unified Ideographs blocks the reference splits
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

std::vector<std::u32string> split_whitespace(const std::u32string& s) {
  std::vector<std::u32string> out;
  std::u32string cur;
  for (char32_t c : s) {
    if (is_python_whitespace(c)) {
      if (!cur.empty()) out.push_back(std::move(cur)), cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  return out;
}

std::u16string to_u16(const std::u32string& s) {
  std::u16string out;
  for (char32_t c : s) {
    if (c > 0xFFFF) {
      out.push_back(static_cast<char16_t>(0xD7C0 + (c >> 10)));
      out.push_back(static_cast<char16_t>(0xDC00 | (c & 0x3FF)));
    } else {
      out.push_back(static_cast<char16_t>(c));
    }
  }
  return out;
}

std::u32string from_u16(const std::u16string& s) {
  std::u32string out;
  for (size_t i = 0; i < s.size();) {
    UChar32 c;
    U16_NEXT(s.data(), i, s.size(), c);
    out.push_back(static_cast<char32_t>(c));
  }
  return out;
}

// Python's str.lower() (full case mapping), then NFD with combining marks (Mn) removed.
std::u32string lower_and_strip_accents(const std::u32string& word) {
  std::u16string in = to_u16(word);
  UErrorCode err = U_ZERO_ERROR;
  std::u16string lower(in.size() * 3 + 4, u'\0');
  int32_t n = u_strToLower(reinterpret_cast<UChar*>(lower.data()), static_cast<int32_t>(lower.size()),
                           reinterpret_cast<const UChar*>(in.data()), static_cast<int32_t>(in.size()), "", &err);
  if (U_FAILURE(err)) return word;
  lower.resize(static_cast<size_t>(n));
  const UNormalizer2* nfd = unorm2_getNFDInstance(&err);
  std::u16string decomposed(lower.size() * 4 + 4, u'\0');
  n = unorm2_normalize(nfd, reinterpret_cast<const UChar*>(lower.data()), static_cast<int32_t>(lower.size()),
                       reinterpret_cast<UChar*>(decomposed.data()), static_cast<int32_t>(decomposed.size()), &err);
  if (U_FAILURE(err)) return from_u16(lower);
  decomposed.resize(static_cast<size_t>(n));
  std::u32string out;
  for (char32_t c : from_u16(decomposed))
    if (u_charType(static_cast<UChar32>(c)) != U_NON_SPACING_MARK) out.push_back(c);
  return out;
}

}  // namespace

bool is_python_whitespace(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

bool is_punctuation(char32_t c) {  // the reference's _is_punctuation: ASCII non-alphanumerics, or P*
  if ((c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126)) return true;
  switch (u_charType(static_cast<UChar32>(c))) {
    case U_DASH_PUNCTUATION:
    case U_START_PUNCTUATION:
    case U_END_PUNCTUATION:
    case U_CONNECTOR_PUNCTUATION:
    case U_OTHER_PUNCTUATION:
    case U_INITIAL_PUNCTUATION:
    case U_FINAL_PUNCTUATION:
      return true;
    default:
      return false;
  }
}

std::u32string utf8_to_u32(std::string_view s) {
  std::u32string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  int32_t i = 0;
  const int32_t n = static_cast<int32_t>(s.size());
  while (i < n) {
    UChar32 c;
    U8_NEXT(p, i, n, c);
    if (c >= 0) out.push_back(static_cast<char32_t>(c));
  }
  return out;
}

std::string u32_to_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) {
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
    } else if (c < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (c >> 6)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else if (c < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (c >> 12)));
      out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (c >> 18)));
      out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
    }
  }
  return out;
}

std::vector<std::string> basic_tokenize(std::string_view text, bool lower_case) {
  // _clean_text and _tokenize_chinese_chars in one pass.
  std::u32string cleaned;
  for (char32_t c : utf8_to_u32(text)) {
    if (c == 0 || c == 0xFFFD || is_control(c)) continue;
    if (is_reference_whitespace(c)) {
      cleaned.push_back(U' ');
    } else if (is_cjk(c)) {
      cleaned.push_back(U' ');
      cleaned.push_back(c);
      cleaned.push_back(U' ');
    } else {
      cleaned.push_back(c);
    }
  }
  std::vector<std::string> out;
  for (std::u32string word : split_whitespace(cleaned)) {
    if (lower_case) word = lower_and_strip_accents(word);
    // _run_split_on_punc: every punctuation character is a word of its own.
    std::u32string cur;
    for (char32_t c : word) {
      if (is_punctuation(c)) {
        if (!cur.empty()) out.push_back(u32_to_utf8(cur)), cur.clear();
        out.push_back(u32_to_utf8(std::u32string(1, c)));
      } else {
        cur.push_back(c);
      }
    }
    if (!cur.empty()) out.push_back(u32_to_utf8(cur));
  }
  // The reference joins and re-splits on whitespace; lower-casing can introduce new whitespace-free
  // text only, so the words above are already that split, except for empty ones (none are produced).
  return out;
}

std::vector<std::string> wordpiece_tokenize(const std::string& word, const Vocab& vocab, int max_chars) {
  const std::u32string chars = utf8_to_u32(word);
  const std::string unk = vocab.token(vocab.unk_id());
  if (static_cast<int>(chars.size()) > max_chars) return {unk};
  std::vector<std::string> pieces;
  size_t start = 0;
  while (start < chars.size()) {
    size_t end = chars.size();
    std::string found;
    while (start < end) {
      std::string piece = (start > 0 ? "##" : "") + u32_to_utf8(chars.substr(start, end - start));
      if (vocab.id(piece) >= 0) {
        found = std::move(piece);
        break;
      }
      --end;
    }
    if (found.empty()) return {unk};
    pieces.push_back(std::move(found));
    start = end;
  }
  return pieces;
}

// Every vocabulary token by its bytes, and every "##" token by the bytes after "##", in open-addressing tables keyed
// on the bytes themselves: WordPiece looks up a piece of a word without building the piece as a string. Duplicate
// tokens resolve as Vocab::id (the last one wins).
class FullTokenizer::PieceIndex {
 public:
  explicit PieceIndex(const Vocab& vocab) {
    size_t bytes = 0;
    for (const std::string& t : vocab.tokens()) bytes += t.size();
    arena_.reserve(bytes);
    size_t capacity = 16;
    while (capacity < 2 * static_cast<size_t>(vocab.size())) capacity *= 2;
    for (auto& table : tables_) table.assign(capacity, Slot{});
    mask_ = capacity - 1;
    for (int32_t id = 0; id < static_cast<int32_t>(vocab.size()); ++id) {
      const std::string& t = vocab.token(id);
      const uint32_t offset = static_cast<uint32_t>(arena_.size());
      arena_ += t;
      insert(0, offset, static_cast<uint32_t>(t.size()), id);
      if (t.size() > 2 && t.compare(0, 2, "##") == 0) insert(1, offset + 2, static_cast<uint32_t>(t.size() - 2), id);
    }
  }

  // The id of `piece` (of "##" + `piece` when `continuation`), or -1.
  int32_t find(std::string_view piece, bool continuation) const {
    const std::vector<Slot>& table = tables_[continuation ? 1 : 0];
    for (size_t i = hash(piece) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = table[i];
      if (s.id < 0) return -1;
      if (s.length == piece.size() && std::memcmp(arena_.data() + s.offset, piece.data(), piece.size()) == 0)
        return s.id;
    }
  }

 private:
  struct Slot {
    uint32_t offset = 0, length = 0;
    int32_t id = -1;
  };

  static uint64_t hash(std::string_view s) {
    uint64_t h = 0x9e3779b97f4a7c15ull ^ s.size();
    const char* p = s.data();
    size_t n = s.size();
    for (; n >= 8; p += 8, n -= 8) {
      uint64_t v;
      std::memcpy(&v, p, 8);
      h = (h ^ v) * 0xbf58476d1ce4e5b9ull;
      h ^= h >> 31;
    }
    uint64_t v = 0;
    std::memcpy(&v, p, n);
    h = (h ^ v) * 0x94d049bb133111ebull;
    return h ^ (h >> 29);
  }

  void insert(int table_index, uint32_t offset, uint32_t length, int32_t id) {
    std::vector<Slot>& table = tables_[table_index];
    const std::string_view key(arena_.data() + offset, length);
    for (size_t i = hash(key) & mask_;; i = (i + 1) & mask_) {
      Slot& s = table[i];
      if (s.id < 0 || (s.length == length && std::memcmp(arena_.data() + s.offset, key.data(), length) == 0)) {
        s = Slot{offset, length, id};
        return;
      }
    }
  }

  std::string arena_;
  std::vector<Slot> tables_[2];  // whole tokens; "##" tokens without their "##"
  size_t mask_ = 0;
};

FullTokenizer::FullTokenizer(const Vocab& vocab, bool lower_case)
    : vocab_(&vocab), lower_case_(lower_case), index_(std::make_shared<const PieceIndex>(vocab)) {}

namespace {

constexpr int kMaxWordChars = 200;  // the reference's max_input_chars_per_word

bool is_ascii_punctuation(unsigned char c) {
  return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
}

// ASCII whitespace the reference maps to a space: the only bytes that end a word in ASCII text (the other ASCII
// whitespace characters are control characters, which cleaning removes without splitting).
bool is_ascii_separator(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

bool all_ascii(std::string_view s) {
  for (char c : s)
    if (static_cast<unsigned char>(c) >= 0x80) return false;
  return true;
}

}  // namespace

// Greedy longest-match-first over the word's code points, as wordpiece_tokenize, on the index.
void FullTokenizer::wordpiece_ids(std::string_view word, bool ascii, std::vector<int32_t>& out) const {
  std::vector<int32_t> offsets;  // byte offset of each code point, and the end (words with non-ASCII only)
  size_t count = word.size();
  if (!ascii) {
    const auto* p = reinterpret_cast<const uint8_t*>(word.data());
    const int32_t n = static_cast<int32_t>(word.size());
    for (int32_t i = 0; i < n;) {
      offsets.push_back(i);
      UChar32 c;
      U8_NEXT(p, i, n, c);
    }
    offsets.push_back(n);
    count = offsets.size() - 1;
  }
  auto at = [&](size_t k) { return ascii ? k : static_cast<size_t>(offsets[k]); };
  if (count > static_cast<size_t>(kMaxWordChars)) {
    out.push_back(vocab_->unk_id());
    return;
  }
  const size_t mark = out.size();
  for (size_t start = 0; start < count;) {
    size_t end = count;
    int32_t id = -1;
    for (; end > start; --end) {
      id = index_->find(word.substr(at(start), at(end) - at(start)), start > 0);
      if (id >= 0) break;
    }
    if (id < 0) {  // one part cannot be matched: the whole word is [UNK]
      out.resize(mark);
      out.push_back(vocab_->unk_id());
      return;
    }
    out.push_back(id);
    start = end;
  }
}

// Cleaning, lower-casing and the punctuation split of an all-ASCII run, byte by byte (`word` is scratch space).
void FullTokenizer::encode_ascii_run(std::string_view run, std::string& word, std::vector<int32_t>& out) const {
  word.clear();
  for (char ch : run) {
    const auto c = static_cast<unsigned char>(ch);
    if (c < 0x20 || c == 0x7F) continue;  // NUL and control characters are removed
    if (is_ascii_punctuation(c)) {
      if (!word.empty()) wordpiece_ids(word, true, out), word.clear();
      wordpiece_ids(std::string_view(&ch, 1), true, out);
      continue;
    }
    word.push_back(lower_case_ && c >= 'A' && c <= 'Z' ? static_cast<char>(c + 32) : ch);
  }
  if (!word.empty()) wordpiece_ids(word, true, out);
}

// The reference's steps are per character (cleaning) or per whitespace-separated word (lower-casing, accents,
// punctuation), and ASCII whitespace always separates words: each run between ASCII whitespace is tokenized alone.
void FullTokenizer::encode(std::string_view text, std::vector<int32_t>& out) const {
  thread_local std::string word;  // scratch, reused: no allocation per call
  size_t i = 0;
  while (i < text.size()) {
    while (i < text.size() && is_ascii_separator(static_cast<unsigned char>(text[i]))) ++i;
    size_t j = i;
    while (j < text.size() && !is_ascii_separator(static_cast<unsigned char>(text[j]))) ++j;
    if (j == i) break;
    const std::string_view run = text.substr(i, j - i);
    if (all_ascii(run)) {
      encode_ascii_run(run, word, out);
    } else {
      for (const std::string& w : basic_tokenize(run, lower_case_)) wordpiece_ids(w, all_ascii(w), out);
    }
    i = j;
  }
}

std::vector<std::string> FullTokenizer::tokenize(std::string_view text) const {
  std::vector<std::string> out;
  for (const std::string& word : basic_tokenize(text, lower_case_))
    for (std::string& piece : wordpiece_tokenize(word, *vocab_)) out.push_back(std::move(piece));
  return out;
}

std::vector<int32_t> FullTokenizer::to_ids(const std::vector<std::string>& tokens) const {
  std::vector<int32_t> ids;
  ids.reserve(tokens.size());
  for (const std::string& t : tokens) {
    const int32_t id = vocab_->id(t);
    ids.push_back(id >= 0 ? id : vocab_->unk_id());
  }
  return ids;
}

Vocab Vocab::from_tokens(std::vector<std::string> tokens, const std::string& where) {
  Vocab v;
  v.tokens_ = std::move(tokens);
  for (size_t i = 0; i < v.tokens_.size(); ++i)
    v.ids_[v.tokens_[i]] = static_cast<int32_t>(i);  // last wins, as the reference
  auto need = [&](const char* t) {
    int32_t id = v.id(t);
    if (id < 0)
      throw VocabError(where + ": the vocabulary has no " + t + " token (BERT needs [PAD] [UNK] [CLS] [SEP] [MASK])");
    return id;
  };
  v.pad_ = need("[PAD]");
  v.unk_ = need("[UNK]");
  v.cls_ = need("[CLS]");
  v.sep_ = need("[SEP]");
  v.mask_ = need("[MASK]");
  return v;
}

Vocab Vocab::load(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw VocabError(path + ": a directory, not a vocabulary file (give its vocab.txt)");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw VocabError(path + ": cannot open vocabulary file");
  std::vector<std::string> tokens;
  std::string line;
  bool first = true;
  while (std::getline(in, line)) {
    // A UTF-8 byte-order mark (editors on Windows write one) is not part of the first token.
    if (first && line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);
    first = false;
    // The reference strips each line (Python str.strip(): ASCII and Unicode whitespace).
    std::u32string u = utf8_to_u32(line);
    size_t b = 0, e = u.size();
    while (b < e && is_python_whitespace(u[b])) ++b;
    while (e > b && is_python_whitespace(u[e - 1])) --e;
    tokens.push_back(u32_to_utf8(u.substr(b, e - b)));
  }
  if (tokens.empty()) throw VocabError(path + ": empty vocabulary file");
  return from_tokens(std::move(tokens), path);
}

void Vocab::save(const std::string& path) const {
  std::string text;
  for (const std::string& t : tokens_) text += t + '\n';
  write_file_atomically(path, text);
}

int32_t Vocab::id(std::string_view token) const {
  auto it = ids_.find(std::string(token));
  return it == ids_.end() ? -1 : it->second;
}

}  // namespace joule::data
