// The raw-text reader of `data create`: input expansion, gzip, chunks of whole documents, and bad input named by
// file and line.
#include <gtest/gtest.h>
#include <zlib.h>

#include "data/data_error.h"
#include "data/text_input.h"
#include "test_util.h"

using joule::data::DocumentChunker;
using joule::data::TextChunk;
using joule::data::TextLimits;
using joule::test::TempDir;

namespace {

void write_gzip(const std::string& path, const std::string& text) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, text.data(), static_cast<unsigned>(text.size())), static_cast<int>(text.size()));
  gzclose(f);
}

// Every chunk's documents, each as its sentences joined by '|'.
std::vector<std::vector<std::string>> read_all(const std::vector<std::string>& files, int64_t chunk_bytes,
                                               TextLimits limits = {}) {
  DocumentChunker chunker(files, chunk_bytes, limits);
  std::vector<std::vector<std::string>> chunks;
  TextChunk c;
  while (chunker.next(c)) {
    EXPECT_EQ(c.index, static_cast<int64_t>(chunks.size()));
    chunks.emplace_back();
    for (size_t d = 0; d < c.documents(); ++d) {
      std::string doc;
      for (size_t s = c.first_sentence(d); s < c.document_ends[d]; ++s)
        doc += (doc.empty() ? "" : "|") + std::string(c.sentence(s));
      chunks.back().push_back(doc);
    }
  }
  return chunks;
}

// The CorpusError message of reading `files`, or "" when reading succeeds.
std::string read_error(const std::vector<std::string>& files, TextLimits limits = {}, int64_t chunk_bytes = 1 << 20) {
  try {
    read_all(files, chunk_bytes, limits);
  } catch (const joule::data::CorpusError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(TextInput, DocumentsEndAtBlankLinesAndFilesChunksCloseAfterTheirBytes) {
  TempDir dir;
  joule::test::write_file(dir.file("a.txt"), "  one.  \ntwo.\n\n\n three.\r\n \t\nfour.");  // no final newline
  joule::test::write_file(dir.file("b.txt"), "five.\nsix.\n\nseven.\n");
  const auto one = read_all({dir.file("a.txt"), dir.file("b.txt")}, 1 << 20);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0], (std::vector<std::string>{"one.|two.", "three.", "four.", "five.|six.", "seven."}));
  // 10-byte chunks: each closes at the first document end past 10 bytes with at least two documents.
  const auto small = read_all({dir.file("a.txt"), dir.file("b.txt")}, 10);
  ASSERT_EQ(small.size(), 2u);
  EXPECT_EQ(small[0], (std::vector<std::string>{"one.|two.", "three."}));
  EXPECT_EQ(small[1], (std::vector<std::string>{"four.", "five.|six.", "seven."}));  // the short last chunk joined
  // A gzip-compressed copy reads the same.
  write_gzip(dir.file("a.txt.gz"), joule::test::read_file(dir.file("a.txt")));
  EXPECT_EQ(read_all({dir.file("a.txt.gz"), dir.file("b.txt")}, 10), small);
  EXPECT_EQ(joule::data::plain_text_bytes({dir.file("a.txt"), dir.file("b.txt")}), 52);
  EXPECT_EQ(joule::data::plain_text_bytes({dir.file("a.txt.gz")}), -1);
}

TEST(TextInput, InputsExpandFromDirectoriesGlobsAndListFiles) {
  TempDir dir;
  std::filesystem::create_directories(dir.file("d/sub"));
  for (const char* f : {"d/b.txt", "d/a.txt", "d/sub/c.txt", "d/.hidden", "x1.txt", "x2.txt"})
    joule::test::write_file(dir.file(f), "s.\n");
  using V = std::vector<std::string>;
  EXPECT_EQ(joule::data::expand_inputs({dir.file("d")}),
            (V{dir.file("d/a.txt"), dir.file("d/b.txt"), dir.file("d/sub/c.txt")}));
  EXPECT_EQ(joule::data::expand_inputs({dir.file("x*.txt")}), (V{dir.file("x1.txt"), dir.file("x2.txt")}));
  joule::test::write_file(dir.file("list"), "# corpus\n" + dir.file("x2.txt") + "\n\n  " + dir.file("d/sub") + "  \n");
  EXPECT_EQ(joule::data::expand_inputs({"@" + dir.file("list")}), (V{dir.file("x2.txt"), dir.file("d/sub/c.txt")}));
  try {
    joule::data::expand_inputs({dir.file("nothing*.txt")});
    FAIL() << "a pattern matching nothing must be refused";
  } catch (const joule::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("nothing*.txt: the pattern matches no files"), std::string::npos) << e.what();
  }
  EXPECT_THROW(joule::data::expand_inputs({dir.file("missing.txt")}), joule::UsageError);
}

TEST(TextInput, BadInputNamesFileAndLineOrIsSkippedAndCounted) {
  TempDir dir;
  joule::test::write_file(dir.file("utf8.txt"), "fine.\nalso fine.\nbad \xff byte.\n\nok.\n");
  EXPECT_NE(read_error({dir.file("utf8.txt")}).find("utf8.txt:3: invalid UTF-8 at byte 5 (0xFF)"), std::string::npos)
      << read_error({dir.file("utf8.txt")});
  joule::test::write_file(dir.file("empty.txt"), "");
  EXPECT_NE(read_error({dir.file("empty.txt")}).find("empty.txt: an empty input file"), std::string::npos);
  joule::test::write_file(dir.file("blank.txt"), "\n  \n\n");
  EXPECT_NE(read_error({dir.file("blank.txt")}).find("blank.txt: holds only blank lines"), std::string::npos);
  // One line over the limit is never held whole: read through and named.
  joule::test::write_file(dir.file("long.txt"), "a.\n\n" + std::string(5000, 'x') + "\nb.\n\nc.\n");
  TextLimits limits;
  limits.max_line_bytes = 1000;
  EXPECT_NE(read_error({dir.file("long.txt")}, limits).find("long.txt:3: a line longer than 1 MB"), std::string::npos)
      << read_error({dir.file("long.txt")}, limits);
  // A document with no blank line over the document limit.
  std::string book;
  for (int i = 0; i < 200; ++i) book += "sentence number " + std::to_string(i) + ".\n";
  joule::test::write_file(dir.file("book.txt"), "short.\n\n" + book + "\nafter.\n");
  limits = {};
  limits.max_document_bytes = 1000;
  const std::string e = read_error({dir.file("book.txt")}, limits);
  EXPECT_NE(e.find("book.txt:3: a document of more than 1 MB (no blank line from line 3 to line"), std::string::npos)
      << e;

  // With skip_bad every one is skipped and counted, and the rest is read.
  limits.max_line_bytes = 1000;
  limits.skip_bad = true;
  DocumentChunker chunker({dir.file("utf8.txt"), dir.file("empty.txt"), dir.file("long.txt"), dir.file("book.txt")},
                          1 << 20, limits);
  TextChunk c;
  ASSERT_TRUE(chunker.next(c));
  EXPECT_FALSE(chunker.next(c) && c.documents() > 0);
  EXPECT_EQ(chunker.stats().skipped_invalid_utf8_lines, 1);
  EXPECT_EQ(chunker.stats().skipped_empty_files, 1);
  EXPECT_EQ(chunker.stats().skipped_long_lines, 1);
  EXPECT_EQ(chunker.stats().skipped_long_documents, 1);
  EXPECT_NE(chunker.stats().first_skip.find("utf8.txt:3"), std::string::npos);
}

TEST(TextInput, InvalidUtf8IsFoundWhereverItIs) {
  EXPECT_EQ(joule::data::invalid_utf8_at("plain ascii"), std::string_view::npos);
  EXPECT_EQ(joule::data::invalid_utf8_at("caf\xc3\xa9 \xe4\xb8\xad"), std::string_view::npos);
  EXPECT_EQ(joule::data::invalid_utf8_at("ab\xc3"), 2u);        // truncated sequence
  EXPECT_EQ(joule::data::invalid_utf8_at("\xed\xa0\x80"), 0u);  // a surrogate
  EXPECT_EQ(joule::data::invalid_utf8_at("x\xc0\xaf"), 1u);     // overlong
}
