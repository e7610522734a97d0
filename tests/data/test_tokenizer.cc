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
  EXPECT_EQ(joule::data::wordpiece_tokenize("abz", vocab), (V{"[UNK]"}));  // one bad piece: whole word
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
  EXPECT_EQ(joule::data::basic_tokenize("ab\xff\xfe" "cd", true), (std::vector<std::string>{"abcd"}));
}
