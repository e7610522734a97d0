// The one place joule touches files through raw descriptors: an owned descriptor (UniqueFd), an exclusive lock
// (FileLock), whole files replaced atomically and durably (write_file_atomically, AtomicFile), a rename made durable
// (rename_durably), and logs appended a line at a time (LineLog). Every failure is an IoError naming the file and the
// cause (ENOSPC, EROFS, ...) with what to do, never a silent short file. No LibTorch.
//
// Atomic replacement: PATH.tmp.PID is written, fsynced and renamed over PATH, then PATH's directory is fsynced, so a
// reader never sees half a file, a crash leaves PATH either as it was or as it is now, a failure leaves PATH as it was
// with no temporary behind, and two processes replacing one file (two jobs refreshing a shared data set's index
// cache) never write into each other's temporary.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "launch/util/error.h"

namespace joule {

// What to do about a failed write, by its cause.
std::string write_failure_hint(int err);
[[noreturn]] void throw_write_error(const std::string& path, const std::string& what, int err);

// An owned file descriptor: closed once, by its last owner.
class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  ~UniqueFd() { reset(); }
  UniqueFd(UniqueFd&& o) noexcept : fd_(std::exchange(o.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& o) noexcept {
    if (this != &o) reset(std::exchange(o.fd_, -1));
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  explicit operator bool() const { return valid(); }
  int release() { return std::exchange(fd_, -1); }
  void reset(int fd = -1);
  // close(2) with its result: a close that fails after writes (NFS, quota) is a failed write. `path` names the file.
  void close_checked(const std::string& path);

 private:
  int fd_ = -1;
};

// open(2) with O_CLOEXEC; IoError naming `path` and `what` ("open for writing") when it fails.
UniqueFd open_file(const std::string& path, int flags, const std::string& what, int mode = 0644);

// Writes all `size` bytes (EINTR and short writes retried).
void write_all(int fd, const std::string& path, const void* data, size_t size);

// fsync(2) of a directory, so that a rename or a new entry inside it survives a crash.
void fsync_directory(const std::string& dir);

// rename(2) of `from` over `to` (files or directories), then an fsync of `to`'s directory.
void rename_durably(const std::string& from, const std::string& to);

// A path read from a file (`listed_in`: a manifest, metadata.json, progress.json) that names a file inside `dir`:
// dir/entry, once the entry is known to stay inside. Refused, with the file and the entry named, before anything
// opens it: an empty or absolute entry, one with a ".." component, or one that resolves (symbolic links followed)
// outside `dir`. An entry that names nothing yet is returned as it is (the caller says what is missing).
std::string path_inside(const std::string& dir, const std::string& entry, const std::string& listed_in);

// Whether `path` is `dir` or lies below it, component by component (a trailing separator of `dir` aside); both as
// given: resolve them first (weakly_canonical) to compare where they lead.
bool path_within(const std::string& path, const std::string& dir);

// A path written inside `file` (an inference run's "model") means the same wherever the command runs: it is kept
// relative to the file's directory. path_for_file writes `path` (as the user typed it, relative to the current
// directory) that way when it names something; path_from_file reads it back: an absolute path as it is, a relative one
// against the file's directory, and a bare name that names nothing there (a preset: "bert-base") as it is.
std::string path_for_file(const std::string& path, const std::string& file);
std::string path_from_file(const std::string& entry, const std::string& file);

// What is wrong with a file that a record (`listed_in`: "the manifest", "metadata.json") lists with its size and
// FNV-1a-64 checksum: "" when `path` is a regular file of `bytes` bytes and, unless `fnv1a64` is empty (a size check
// only), of that checksum; else "is missing (or not a file)", "has N bytes, LISTED_IN says M" or "does not have the
// checksum LISTED_IN records (its content changed)", for the caller to put after the file's name.
std::string listed_file_problem(const std::string& path, uint64_t bytes, const std::string& fnv1a64,
                                const std::string& listed_in);

// Nothing at `path`, or a regular file; else IoError naming what is there (a directory, a symbolic link, a device, a
// FIFO, a socket): an output never replaces what is not a file (`report --out /dev/full` must not turn the device
// node into a file).
void check_replaceable(const std::string& path);

// Temporaries in flight (AtomicFile's PATH.tmp.PID, StagedDirectory's OUT.tmp.PID) are registered while they exist:
// SIGTERM, SIGINT and SIGHUP remove them before the process dies of the signal (install once, in main; a command that
// handles SIGTERM itself, like train's checkpoint on preemption, replaces the handler), and a later write to the same
// output removes those a killed process left (PATH.tmp.N of a process N that is gone).
void remove_temporaries_on_signals();
// Removes `path`.tmp.N (file or directory) of every process N that no longer runs; returns how many went.
int remove_stale_temporaries(const std::string& path);

// What is at `path`, for messages: "a directory", "a FIFO", "a symbolic link", ... (lstat); "" when nothing is.
std::string file_kind_at(const std::string& path);

// A regular file or a directory (or nothing: the caller says what is missing); else IoError naming what it is. A FIFO
// or a device given as an input could block the command for good.
void refuse_special_input(const std::string& path);

// A file written as a whole and then put in place: bytes go to PATH.tmp.PID; commit() fsyncs, closes, renames it over
// PATH and fsyncs the directory. Destroyed without commit() (an error unwinding), it removes the temporary. PATH must
// be free or a regular file (check_replaceable, before anything is written and again before the rename).
class AtomicFile {
 public:
  explicit AtomicFile(std::string path);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const void* data, size_t size);
  void write(const std::string& bytes) { write(bytes.data(), bytes.size()); }
  void commit();
  const std::string& tmp_path() const { return tmp_; }

 private:
  std::string path_, tmp_;
  UniqueFd fd_;
  int slot_ = -1;  // in the registry of temporaries
};

// A directory built whole and then put in place (a model directory): files go into OUT.tmp.PID; commit() swaps it in
// for OUT (an OUT already there is moved aside and removed once the new one is in place). Destroyed without commit(),
// or stopped by a signal, it removes the temporary directory.
class StagedDirectory {
 public:
  explicit StagedDirectory(std::string out);
  ~StagedDirectory();
  StagedDirectory(const StagedDirectory&) = delete;
  StagedDirectory& operator=(const StagedDirectory&) = delete;

  const std::string& path() const { return tmp_; }  // where the files go
  void commit();
  // Runs `write` (which fills path()); an IoError it throws names the output's files, not the temporary directory's.
  template <typename Write>
  void fill(Write write) {
    try {
      write(tmp_);
    } catch (const IoError& e) {
      std::string what = e.what();
      for (size_t at; (at = what.find(tmp_)) != std::string::npos;) what.replace(at, tmp_.size(), out_);
      throw IoError(what, e.hint());
    }
  }

 private:
  std::string out_, tmp_;
  int slot_ = -1;
  bool committed_ = false;
};

// The whole of `path`; IoError naming it and why it cannot be read: not there, a directory, not readable, a read
// that failed part-way (never libstdc++'s "basic_filebuf::underflow").
std::string read_text_file(const std::string& path);

// `bytes` as the whole of `path`, atomically and durably.
void write_file_atomically(const std::string& path, const std::string& bytes);

// An exclusive POSIX record lock (fcntl F_SETLK) on a file, held while this object lives: the lock NFS carries to
// the server and Lustre/GPFS honour when mounted with locking; the kernel releases it when the holder dies.
class FileLock {
 public:
  // Creates `path` if needed and locks it. nullopt when another process holds it; IoError naming the file when the
  // file cannot be opened or the file system cannot lock (ENOLCK, ENOSYS).
  static std::optional<FileLock> try_acquire(const std::string& path);

  FileLock(FileLock&&) noexcept = default;
  FileLock& operator=(FileLock&&) noexcept = default;

  int fd() const { return fd_.get(); }
  const std::string& path() const { return path_; }
  // Whether `path` still names the locked file (another process may have unlinked and recreated it).
  bool still_at_path() const;
  // The file's text (the holder's description), up to 511 bytes, trailing blanks cut.
  static std::string read_text(int fd);
  void replace_text(const std::string& text);

 private:
  FileLock(std::string path, UniqueFd fd) : path_(std::move(path)), fd_(std::move(fd)) {}
  std::string path_;
  UniqueFd fd_;
};

// A log a line at a time (metrics.jsonl): opened for appending, each line written whole with one write(2). A file
// that ends in a partial line (its writer was killed mid-write) is cut back to its last complete line when opened, so
// that what follows is appended to whole records; cut_bytes() says how much went.
class LineLog {
 public:
  LineLog() = default;
  explicit LineLog(std::string path);
  bool is_open() const { return fd_.valid(); }
  void write_line(const std::string& line);
  int64_t cut_bytes() const { return cut_bytes_; }

 private:
  std::string path_;
  UniqueFd fd_;
  int64_t cut_bytes_ = 0;
};

}  // namespace joule
