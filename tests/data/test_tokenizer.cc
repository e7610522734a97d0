// joule's tokenizer against golden cases from tools/reference/tokenizer_golden.py (the reference
// tokenization.py's semantics on Python's unicodedata).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "data/tokenizer.h"
#include "test_util.h"

using joule::data::Vocab;

namespace {
const std::string kDir = std::string(JOULE_TEST_FIXTURES) + "/tokenizer";
}

TEST(Tokenizer, MatchesReferenceOnGoldenCases) {
  const Vocab vocab = Vocab::load(kDir + "/vocab.txt");
  const auto expected = nlohmann::json::parse(joule::test::read_file(kDir + "/expected.json"));
  int checked = 0;
  for (const auto& c : expected["cases"]) {
    const std::string text = c["text"];
    const bool lower = c["lower_case"];
    SCOPED_TRACE("text \"" + text.substr(0, 60) + "\" lower_case=" + (lower ? "1" : "0"));
    EXPECT_EQ(joule::data::basic_tokenize(text, lower), c["words"].get<std::vector<std::string>>());
    joule::data::FullTokenizer tok(vocab, lower);
    EXPECT_EQ(tok.tokenize(text), c["tokens"].get<std::vector<std::string>>());
    ++checked;
  }
  EXPECT_GE(checked, 90);
}

TEST(Tokenizer, WordPieceGreedyLongestMatch) {
  const Vocab vocab = Vocab::load(kDir + "/vocab.txt");
  using V = std::vector<std::string>;
  EXPECT_EQ(joule::data::wordpiece_tokenize("unaffable", vocab), (V{"un", "##aff", "##able"}));
  EXPECT_EQ(joule::data::wordpiece_tokenize("abc", vocab), (V{"a", "##b", "##c"}));
  EXPECT_EQ(joule::data::wordpiece_tokenize("xxxxx", vocab), (V{"x", "##xx", "##xx"}));
  EXPECT_EQ(joule::data::wordpiece_tokenize("abz", vocab), (V{"[UNK]"}));                 // one bad piece: whole word
  EXPECT_EQ(joule::data::wordpiece_tokenize(std::string(200, 'x'), vocab).size(), 101u);  // x, 99 x ##xx, ##x
  EXPECT_EQ(joule::data::wordpiece_tokenize(std::string(201, 'x'), vocab), (V{"[UNK]"}));
  EXPECT_EQ(joule::data::wordpiece_tokenize("中", vocab), (V{"中"}));
}

TEST(Tokenizer, VocabNeedsSpecialTokensAndNamesTheFile) {
  joule::test::TempDir dir;
  joule::test::write_file(dir.file("v.txt"), "[PAD]\n[UNK]\n[CLS]\n[SEP]\nhello\n");
  try {
    Vocab::load(dir.file("v.txt"));
    FAIL() << "a vocabulary without [MASK] must be refused";
  } catch (const joule::data::VocabError& e) {
    EXPECT_NE(std::string(e.what()).find("v.txt: the vocabulary has no [MASK]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(Vocab::load(dir.file("missing.txt")), joule::data::VocabError);
  joule::test::write_file(dir.file("ok.txt"), "[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\n  spaced \nhello\n");
  Vocab v = Vocab::load(dir.file("ok.txt"));
  EXPECT_EQ(v.size(), 7);
  EXPECT_EQ(v.id("spaced"), 5);  // lines are stripped, as the reference does
  EXPECT_EQ(v.mask_id(), 4);
  v.save(dir.file("again.txt"));
  EXPECT_EQ(Vocab::load(dir.file("again.txt")).tokens(), v.tokens());
  // A UTF-8 byte-order mark (Windows editors) is not part of the first token.
  joule::test::write_file(dir.file("bom.txt"), "\xEF\xBB\xBF[PAD]\n[UNK]\n[CLS]\n[SEP]\n[MASK]\nhello\n");
  EXPECT_EQ(Vocab::load(dir.file("bom.txt")).id("[PAD]"), 0);
}

TEST(Tokenizer, InvalidUtf8IsDroppedNotFatal) {
  EXPECT_EQ(joule::data::basic_tokenize("ab\xff\xfe"
                                        "cd",
                                        true),
            (std::vector<std::string>{"abcd"}));
}

namespace {
// The ids the string path gives: the reference's semantics, which encode() must reproduce exactly.
std::vector<int32_t> string_path(const joule::data::FullTokenizer& tok, const std::string& text) {
  return tok.to_ids(tok.tokenize(text));
}
std::vector<int32_t> encoded(const joule::data::FullTokenizer& tok, const std::string& text) {
  std::vector<int32_t> ids = {-7};  // encode appends: what was there stays
  tok.encode(text, ids);
  EXPECT_EQ(ids.front(), -7);
  return std::vector<int32_t>(ids.begin() + 1, ids.end());
}
}  // namespace

TEST(Tokenizer, EncodeGivesTheIdsOfTheStringPathOnGoldenCases) {
  const Vocab vocab = Vocab::load(kDir + "/vocab.txt");
  const auto expected = nlohmann::json::parse(joule::test::read_file(kDir + "/expected.json"));
  for (const auto& c : expected["cases"]) {
    const std::string text = c["text"];
    SCOPED_TRACE("text \"" + text.substr(0, 60) + "\"");
    joule::data::FullTokenizer tok(vocab, c["lower_case"].get<bool>());
    EXPECT_EQ(encoded(tok, text), tok.to_ids(c["tokens"].get<std::vector<std::string>>()));
  }
}

// Random mixes of the characters where the fast ASCII path and ICU could part: controls that vanish without
// splitting, ASCII and Unicode whitespace and punctuation, capitals, accents, final sigma, CJK, invalid bytes,
// words over 200 characters, duplicate vocabulary entries.
TEST(Tokenizer, EncodeGivesTheIdsOfTheStringPathOnRandomText) {
  std::vector<std::string> tokens = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "un",   "##aff", "##able",
                                     "a",     "##b",   "##a",   "b",     "ab",     "é",   "e",    "##e",   "中",
                                     "!",     ".",     "##s",   "run",   "##ning", "σ",   "ς",    "##ς",   "x",
                                     "##x",   "##xx",  "the",   "##",    "#",      "##é", "cafe", "##ß",   "ss"};
  const Vocab vocab = Vocab::from_tokens(tokens, "test vocab");
  const std::vector<std::string> alphabet = {"a",
                                             "b",
                                             "A",
                                             "B",
                                             "e",
                                             "x",
                                             "X",
                                             "the",
                                             "The",
                                             "un",
                                             "aff",
                                             "able",
                                             "run",
                                             "ning",
                                             "s",
                                             " ",
                                             " ",
                                             "\t",
                                             "\n",
                                             "\r",
                                             "\v",
                                             "\f",
                                             "\x1c",
                                             "\x01",
                                             "\x7f",
                                             std::string(1, '\0'),
                                             ".",
                                             "!",
                                             "#",
                                             "-",
                                             "\xc2\xa0" /* NBSP */,
                                             "\xe3\x80\x80" /* ideographic space */,
                                             "\xe2\x80\x8b" /* zero-width space, Cf */,
                                             "\xc3\xa9" /* é */,
                                             "e\xcc\x81" /* e + combining acute */,
                                             "\xc3\x89" /* É */,
                                             "\xce\xa3" /* Σ */,
                                             "\xe4\xb8\xad" /* 中 */,
                                             "\xe2\x80\x9c" /* “ */,
                                             "\xc3\x9f" /* ß */,
                                             "\xff",
                                             "\xc3",
                                             "\xef\xbf\xbd" /* U+FFFD */,
                                             std::string(120, 'x')};
  uint64_t state = 12345;
  auto next = [&] {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<size_t>(state >> 33);
  };
  for (bool lower : {true, false}) {
    joule::data::FullTokenizer tok(vocab, lower);
    for (int n = 0; n < 3000; ++n) {
      std::string text;
      const size_t pieces = next() % 24;
      for (size_t k = 0; k < pieces; ++k) text += alphabet[next() % alphabet.size()];
      ASSERT_EQ(encoded(tok, text), string_path(tok, text)) << "lower_case=" << lower << " text \"" << text << "\"";
    }
  }
}
