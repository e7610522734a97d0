#include "data/text_input.h"

#include <glob.h>
#include <unicode/utf8.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "data/data_error.h"
#include "launch/util/error.h"

namespace joule::data {
namespace fs = std::filesystem;

namespace {

std::string_view trimmed(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r\n\v\f");
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(" \t\r\n\v\f") - b + 1);
}

std::string megabytes(int64_t bytes) { return std::to_string((bytes + (1 << 20) - 1) >> 20) + " MB"; }

void expand_one(const std::string& spec, std::vector<std::string>& out, int depth) {
  std::error_code ec;
  if (spec.size() > 1 && spec[0] == '@') {
    const std::string list = spec.substr(1);
    std::ifstream in(list);
    if (!in) throw joule::UsageError("--input " + spec + ": cannot open the list file " + list);
    if (depth > 4) throw joule::UsageError("--input " + spec + ": list files nest more than 4 deep");
    // Entries are relative to the list's directory (as a shard list's are), so a list works from any directory.
    const fs::path base = fs::path(list).parent_path();
    std::string line;
    while (std::getline(in, line)) {
      std::string entry(trimmed(std::string_view(line)));
      if (entry.empty() || entry[0] == '#') continue;
      const bool nested = entry.size() > 1 && entry[0] == '@';
      const std::string path = nested ? entry.substr(1) : entry;
      if (fs::path(path).is_relative()) entry = (nested ? "@" : "") + (base / path).string();
      expand_one(entry, out, depth + 1);
    }
    return;
  }
  if (fs::is_directory(spec, ec)) {
    std::vector<std::string> files;
    for (auto it = fs::recursive_directory_iterator(spec, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec)) {
      const std::string name = it->path().filename().string();
      if (!name.empty() && name[0] == '.') {
        if (it->is_directory(ec)) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file(ec)) files.push_back(it->path().string());
    }
    if (ec) throw joule::IoError("--input " + spec + ": cannot list the directory (" + ec.message() + ")");
    if (files.empty()) throw joule::UsageError("--input " + spec + ": the directory holds no files");
    std::sort(files.begin(), files.end());
    out.insert(out.end(), files.begin(), files.end());
    return;
  }
  if (fs::exists(spec, ec)) {
    out.push_back(spec);
    return;
  }
  if (spec.find_first_of("*?[") != std::string::npos) {
    glob_t g{};
    const int rc = ::glob(spec.c_str(), 0, nullptr, &g);
    std::vector<std::string> matches(g.gl_pathv, g.gl_pathv + (rc == 0 ? g.gl_pathc : 0));
    globfree(&g);
    if (matches.empty()) throw joule::UsageError("--input " + spec + ": the pattern matches no files");
    for (const std::string& m : matches) expand_one(m, out, depth);  // sorted by glob(); directories expand
    return;
  }
  throw joule::UsageError("--input " + spec + ": no such file, directory or pattern");
}

}  // namespace

std::vector<std::string> expand_inputs(const std::vector<std::string>& specs) {
  std::vector<std::string> files;
  for (const std::string& spec : specs) expand_one(spec, files, 0);
  // One file named twice (the same --input given twice, a directory and a file inside it, two links to one file)
  // would put its documents in the data set twice, and possibly on both sides of the held-out split.
  std::map<std::string, std::string> seen;  // the file's real path -> how it was first named
  for (const std::string& f : files) {
    std::error_code ec;
    const std::string real = fs::weakly_canonical(f, ec).string();
    const auto [it, fresh] = seen.emplace(ec ? f : real, f);
    if (!fresh)
      throw joule::UsageError("--input: " + f + " is " +
                                  (it->second == f ? "named twice" : "the same file as " + it->second) +
                                  ": its documents would be in the data set twice, and could land on both sides of "
                                  "the held-out split",
                              "give each input file once");
  }
  return files;
}

int64_t plain_text_bytes(const std::vector<std::string>& files) {
  int64_t total = 0;
  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    unsigned char magic[2] = {0, 0};
    in.read(reinterpret_cast<char*>(magic), 2);
    if (magic[0] == 0x1f && magic[1] == 0x8b) return -1;
    std::error_code ec;
    total += static_cast<int64_t>(fs::file_size(f, ec));
  }
  return total;
}

size_t invalid_utf8_at(std::string_view s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  const int32_t n = static_cast<int32_t>(s.size());
  for (int32_t i = 0; i < n;) {
    if (p[i] < 0x80) {
      ++i;
      continue;
    }
    const int32_t at = i;
    UChar32 c;
    U8_NEXT(p, i, n, c);
    if (c < 0) return static_cast<size_t>(at);
  }
  return std::string_view::npos;
}

void TextChunk::clear() {
  index = input_bytes = 0;
  text.clear();
  sentence_ends.clear();
  document_ends.clear();
  first_line.clear();
}

// One input file, plain or gzip (zlib reads plain files as they are), line by line through a buffer that never
// holds more than one over-long line's limit.
class DocumentChunker::LineReader {
 public:
  enum class Kind { line, too_long, end };

  LineReader(std::string path, int64_t max_line) : path_(std::move(path)), max_line_(static_cast<size_t>(max_line)) {
    file_ = gzopen(path_.c_str(), "rb");
    if (file_ == nullptr) throw joule::IoError(path_ + ": cannot open input text (" + std::strerror(errno) + ")");
    gzbuffer(file_, 1 << 18);
    buffer_.resize(std::min<size_t>(1 << 20, max_line_ + 1));
  }
  ~LineReader() { gzclose(file_); }
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // The next line without its newline. too_long: the line passed max_line bytes; it was read through to its end
  // and dropped.
  Kind next(std::string_view& line) {
    for (;;) {
      const char* start = buffer_.data() + begin_;
      if (const void* nl = std::memchr(start, '\n', end_ - begin_)) {
        line = std::string_view(start, static_cast<const char*>(nl) - start);
        begin_ += line.size() + 1;
        return took(line.size() + 1, Kind::line);
      }
      if (end_ - begin_ > max_line_) return drop_long_line();
      if (eof_) {
        if (begin_ == end_) return Kind::end;
        line = std::string_view(start, end_ - begin_);
        begin_ = end_;
        return took(line.size(), Kind::line);
      }
      fill();
    }
  }

  const std::string& path() const { return path_; }
  int64_t line_number() const { return line_; }
  int64_t bytes() const { return bytes_; }

 private:
  Kind took(size_t bytes, Kind kind) {
    bytes_ += static_cast<int64_t>(bytes);
    ++line_;
    return kind;
  }

  Kind drop_long_line() {
    size_t dropped = end_ - begin_;
    begin_ = end_ = 0;
    for (;;) {
      if (!fill()) return took(dropped, Kind::too_long);
      if (const void* nl = std::memchr(buffer_.data(), '\n', end_)) {
        const size_t n = static_cast<const char*>(nl) - buffer_.data() + 1;
        begin_ = n;
        return took(dropped + n, Kind::too_long);
      }
      dropped += end_;
      begin_ = end_ = 0;
    }
  }

  // Moves the unread bytes to the front (growing the buffer up to max_line + 1) and reads more; false at the end.
  bool fill() {
    if (begin_ > 0) {
      std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
      end_ -= begin_;
      begin_ = 0;
    }
    if (end_ == buffer_.size()) buffer_.resize(std::min(buffer_.size() * 2, max_line_ + 1));
    const size_t room = std::min<size_t>(buffer_.size() - end_, 1u << 30);
    const int n = gzread(file_, buffer_.data() + end_, static_cast<unsigned>(room));
    if (n < 0) {
      int code = 0;
      const char* what = gzerror(file_, &code);
      throw joule::IoError(path_ + ": read error after " + std::to_string(bytes_) + " bytes (" +
                           (code == Z_ERRNO ? std::strerror(errno) : what) + ")");
    }
    if (n == 0) {
      int code = 0;
      const char* what = gzerror(file_, &code);
      if (code != Z_OK && code != Z_BUF_ERROR)
        throw joule::IoError(path_ + ": damaged gzip data after " + std::to_string(bytes_) + " bytes (" + what + ")");
      if (code == Z_BUF_ERROR)
        throw CorpusError(
            path_ + ": the gzip stream ends early (a truncated file?) after " + std::to_string(bytes_) + " bytes",
            "copy or decompress the file again; or leave it out of --input");
      eof_ = true;
      return false;
    }
    end_ += static_cast<size_t>(n);
    return true;
  }

  std::string path_;
  size_t max_line_;
  gzFile file_ = nullptr;
  std::string buffer_;
  size_t begin_ = 0, end_ = 0;
  bool eof_ = false;
  int64_t line_ = 0, bytes_ = 0;
};

DocumentChunker::DocumentChunker(std::vector<std::string> files, int64_t chunk_bytes, TextLimits limits)
    : files_(std::move(files)), chunk_bytes_(std::max<int64_t>(1, chunk_bytes)), limits_(limits) {}

DocumentChunker::~DocumentChunker() = default;

void DocumentChunker::skip(int64_t& counter, const std::string& why) {
  ++counter;
  if (stats_.first_skip.empty()) stats_.first_skip = why;
}

bool DocumentChunker::read_chunk(TextChunk& c, size_t documents) {
  bool in_document = false, dropping = false;  // dropping: the rest of a document over the limit (skip_bad)
  size_t document_text = 0, document_sentences = 0;
  int64_t document_line = 0;
  auto end_document = [&] {
    if (in_document) {
      c.document_ends.push_back(c.sentence_ends.size());
      ++stats_.documents;
    }
    in_document = dropping = false;
  };
  auto full = [&] {
    return documents > 0 ? c.documents() >= documents : c.input_bytes >= chunk_bytes_ && c.documents() >= 2;
  };
  for (;;) {
    if (!reader_) {
      if (file_index_ == files_.size()) {
        end_document();
        return false;
      }
      reader_ = std::make_unique<LineReader>(files_[file_index_], limits_.max_line_bytes);
      ++stats_.files;
      file_has_text_ = false;
    }
    const int64_t before = reader_->bytes();
    std::string_view line;
    const LineReader::Kind kind = reader_->next(line);
    c.input_bytes += reader_->bytes() - before;
    stats_.input_bytes += reader_->bytes() - before;
    if (kind == LineReader::Kind::end) {  // a new file starts a new document
      end_document();
      if (!file_has_text_) {
        const std::string why =
            reader_->path() + (reader_->bytes() == 0 ? ": an empty input file" : ": holds only blank lines");
        if (!limits_.skip_bad)
          throw CorpusError(why, "remove it from --input, or pass --skip-bad-input to skip and count such files");
        skip(stats_.skipped_empty_files, why);
      }
      reader_.reset();
      ++file_index_;
      if (full()) return true;
      continue;
    }
    ++stats_.lines;
    auto here = [&] { return reader_->path() + ":" + std::to_string(reader_->line_number()); };
    if (kind == LineReader::Kind::too_long) {
      const std::string why =
          here() + ": a line longer than " + megabytes(limits_.max_line_bytes) + " (one sentence per line is expected)";
      if (!limits_.skip_bad)
        throw CorpusError(why,
                          "split the text into one sentence per line, or pass --skip-bad-input to skip such lines");
      skip(stats_.skipped_long_lines, why);
      file_has_text_ = true;
      continue;
    }
    const std::string_view sentence = trimmed(line);
    if (sentence.empty()) {
      end_document();
      if (full()) return true;
      continue;
    }
    file_has_text_ = true;
    if (const size_t bad = invalid_utf8_at(sentence); bad != std::string_view::npos) {
      char byte[8];
      std::snprintf(byte, sizeof byte, "0x%02X", static_cast<unsigned char>(sentence[bad]));
      const std::string why = here() + ": invalid UTF-8 at byte " +
                              std::to_string(bad + 1 + (sentence.data() - line.data())) + " (" + byte + ")";
      if (!limits_.skip_bad)
        throw CorpusError(
            why, "convert the file to UTF-8 (iconv -f ... -t UTF-8), or pass --skip-bad-input to skip such lines");
      skip(stats_.skipped_invalid_utf8_lines, why);
      continue;
    }
    if (dropping) continue;
    if (!in_document) {
      in_document = true;
      document_text = c.text.size();
      document_sentences = c.sentence_ends.size();
      document_line = reader_->line_number();
      if (c.documents() == 0) c.first_line = here();
    }
    if (static_cast<int64_t>(c.text.size() - document_text + sentence.size()) > limits_.max_document_bytes) {
      const std::string why = reader_->path() + ":" + std::to_string(document_line) + ": a document of more than " +
                              megabytes(limits_.max_document_bytes) + " (no blank line from line " +
                              std::to_string(document_line) + " to line " + std::to_string(reader_->line_number()) +
                              ")";
      if (!limits_.skip_bad)
        throw CorpusError(
            why,
            "documents are separated by blank lines: is the whole file one document? Add the blank lines, raise "
            "--memory-budget (the limit is one chunk), or pass --skip-bad-input to skip such documents");
      skip(stats_.skipped_long_documents, why);
      c.text.resize(document_text);
      c.sentence_ends.resize(document_sentences);
      in_document = false;
      dropping = true;
      continue;
    }
    c.text.append(sentence);
    c.sentence_ends.push_back(c.text.size());
  }
}

bool DocumentChunker::next(TextChunk& chunk) {
  chunk = std::move(ahead_);  // the documents read ahead begin this chunk
  ahead_.clear();
  if (!exhausted_) exhausted_ = !read_chunk(chunk, 0);
  if (chunk.documents() == 0) return false;
  chunk.index = next_index_++;
  if (!exhausted_) {
    exhausted_ = !read_chunk(ahead_, 2);         // the next chunk's first two documents, no more
    if (exhausted_ && ahead_.documents() < 2) {  // the input ends with a single document: it joins this chunk
      const size_t text_offset = chunk.text.size(), sentence_offset = chunk.sentence_ends.size();
      chunk.text += ahead_.text;
      for (size_t e : ahead_.sentence_ends) chunk.sentence_ends.push_back(e + text_offset);
      for (size_t e : ahead_.document_ends) chunk.document_ends.push_back(e + sentence_offset);
      chunk.input_bytes += ahead_.input_bytes;
      ahead_.clear();
    }
  }
  return true;
}

}  // namespace joule::data
