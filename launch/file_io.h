// Checked writes for every file joule leaves for a user or a reader: whole files are written atomically (PATH.tmp,
// written, fsynced, renamed over PATH, so a reader never sees half of one and a failure leaves PATH as it was); logs
// are appended a line at a time and every append is checked. A failure is an IoError naming the file and the cause
// (ENOSPC, EROFS, ...) with what to do, never a silent short file. Header only, no LibTorch.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "launch/error.h"

namespace joule {

// What to do about a failed write, by its cause.
inline std::string write_failure_hint(int err) {
  switch (err) {
    case ENOSPC:
    case EDQUOT: return "the file system is full: free space (or write elsewhere), then run the command again";
    case EROFS: return "the file system is read-only: write to another directory";
    case EACCES:
    case EPERM: return "no permission to write there: fix the permissions or write to another directory";
    case ENAMETOOLONG: return "the path is too long: choose a shorter directory";
    default: return "check the path and its file system, then run the command again";
  }
}

[[noreturn]] inline void throw_write_error(const std::string& path, const std::string& what, int err) {
  throw IoError(path + ": " + what + " failed: " + std::strerror(err), write_failure_hint(err));
}

namespace detail {
inline void write_all(int fd, const std::string& path, const char* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      throw_write_error(path, "write", err);
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
}
}  // namespace detail

// `bytes` as the whole of `path`, atomically and durably.
inline void write_file_atomic(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw_write_error(tmp, "open for writing", errno);
  try {
    detail::write_all(fd, tmp, bytes.data(), bytes.size());
    if (::fsync(fd) != 0) throw_write_error(tmp, "fsync", errno);
  } catch (...) {
    ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw_write_error(tmp, "close", err);
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw_write_error(path, "rename from " + tmp, err);
  }
}

// A log a line at a time (metrics.jsonl): opened for appending, each line written whole with one write(2).
class LineLog {
 public:
  LineLog() = default;
  explicit LineLog(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) throw_write_error(path_, "open for appending", errno);
  }
  ~LineLog() {
    if (fd_ >= 0) ::close(fd_);
  }
  LineLog(LineLog&& o) noexcept : path_(std::move(o.path_)), fd_(std::exchange(o.fd_, -1)) {}
  LineLog& operator=(LineLog&& o) noexcept {
    std::swap(path_, o.path_);
    std::swap(fd_, o.fd_);
    return *this;
  }
  LineLog(const LineLog&) = delete;
  LineLog& operator=(const LineLog&) = delete;

  bool is_open() const { return fd_ >= 0; }
  void write_line(const std::string& line) {
    const std::string text = line + "\n";
    detail::write_all(fd_, path_, text.data(), text.size());
  }

 private:
  std::string path_;
  int fd_ = -1;
};

}  // namespace joule
