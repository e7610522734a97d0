// The raw text `joule data create` reads, as it arrives from a Wikipedia or BookCorpus extraction: many files
// (named, a directory, a glob, or @LIST), plain or gzip-compressed, one sentence per line, a blank line between
// documents. Read line by line in bounded memory and handed on in chunks of whole documents. No LibTorch.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace joule::data {

// The files named by `specs`, in order: a FILE as given, a DIRECTORY's regular files (recursively, sorted by path,
// hidden files skipped), a glob PATTERN's matches (sorted), or @LIST (one path, directory or pattern per line,
// '#' comments). UsageError names a spec that matches nothing.
std::vector<std::string> expand_inputs(const std::vector<std::string>& specs);

// The uncompressed size of `files` when every one is plain text; -1 when one is gzip-compressed.
int64_t plain_text_bytes(const std::vector<std::string>& files);

struct TextLimits {
  int64_t max_line_bytes = 16ll << 20;      // a longer line is bad input (it is read in pieces, never whole)
  int64_t max_document_bytes = 64ll << 20;  // a longer document (no blank line) is bad input
  bool skip_bad = false;  // bad lines, documents and empty files are skipped and counted instead of stopping the run
};

// What reading skipped (only with TextLimits::skip_bad) and read.
struct TextStats {
  int64_t files = 0, input_bytes = 0, lines = 0, documents = 0;
  int64_t skipped_invalid_utf8_lines = 0, skipped_long_lines = 0, skipped_long_documents = 0, skipped_empty_files = 0;
  std::string first_skip;  // FILE:LINE and why, of the first thing skipped
  int64_t skipped() const {
    return skipped_invalid_utf8_lines + skipped_long_lines + skipped_long_documents + skipped_empty_files;
  }
};

// Whole documents, their sentences' bytes end to end (leading/trailing whitespace stripped, as Google's script).
struct TextChunk {
  int64_t index = 0;        // 0, 1, 2, ... in input order
  int64_t input_bytes = 0;  // uncompressed input bytes it covers (blank lines included)
  std::string text;
  std::vector<size_t> sentence_ends;  // end offset in `text` of each sentence
  std::vector<size_t> document_ends;  // one past each document's last sentence (an index into sentence_ends)
  std::string first_line;             // FILE:LINE where its first document begins, for errors

  size_t documents() const { return document_ends.size(); }
  size_t sentences() const { return sentence_ends.size(); }
  std::string_view sentence(size_t i) const {
    const size_t begin = i == 0 ? 0 : sentence_ends[i - 1];
    return std::string_view(text).substr(begin, sentence_ends[i] - begin);
  }
  size_t first_sentence(size_t document) const { return document == 0 ? 0 : document_ends[document - 1]; }
  void clear();
};

// Reads the files in order and cuts the text into chunks of whole documents: a chunk closes at the first document end
// after `chunk_bytes` of input. A document ends at a blank line or at the end of its file. A last chunk with fewer
// than two documents joins the one before it (the random next sentence needs another document): to know, the
// chunker reads the next chunk's first two documents ahead, no more. Bad input raises
// CorpusError naming the file and line: invalid UTF-8, a line or a document over the limits, an empty file.
class DocumentChunker {
 public:
  DocumentChunker(std::vector<std::string> files, int64_t chunk_bytes, TextLimits limits);
  ~DocumentChunker();
  DocumentChunker(const DocumentChunker&) = delete;
  DocumentChunker& operator=(const DocumentChunker&) = delete;

  bool next(TextChunk& chunk);  // false when the input is exhausted
  const TextStats& stats() const { return stats_; }

 private:
  class LineReader;
  // Reads on into `chunk` until it is full (documents == 0) or holds `documents` documents; false when the input
  // ended first.
  bool read_chunk(TextChunk& chunk, size_t documents);
  bool next_line(std::string_view& line);
  void skip(int64_t& counter, const std::string& why);

  std::vector<std::string> files_;
  int64_t chunk_bytes_;
  TextLimits limits_;
  TextStats stats_;
  size_t file_index_ = 0;
  std::unique_ptr<LineReader> reader_;
  TextChunk ahead_;  // the next chunk's first two documents, read ahead to find a single last document to merge
  bool exhausted_ = false;
  bool file_has_text_ = false;  // the current file has had a line that is not blank
  int64_t next_index_ = 0;
};

// The byte offset of the first invalid UTF-8 sequence in `s`, or npos.
size_t invalid_utf8_at(std::string_view s);

}  // namespace joule::data
