#include "launch/util/file_io.h"
#include "launch/util/hash.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

namespace joule {

std::string write_failure_hint(int err) {
  switch (err) {
    case ENOSPC:
    case EDQUOT:
      return "the file system is full: free space (or write elsewhere), then run the command again";
    case EROFS:
      return "the file system is read-only: write to another directory";
    case EACCES:
    case EPERM:
      return "no permission to write there: fix the permissions or write to another directory";
    case ENAMETOOLONG:
      return "the path is too long: choose a shorter directory";
    default:
      return "check the path and its file system, then run the command again";
  }
}

void throw_write_error(const std::string& path, const std::string& what, int err) {
  throw IoError(path + ": " + what + " failed: " + std::strerror(err), write_failure_hint(err));
}

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
}

void UniqueFd::close_checked(const std::string& path) {
  if (fd_ < 0) return;
  const int fd = std::exchange(fd_, -1);
  if (::close(fd) != 0) throw_write_error(path, "close", errno);
}

UniqueFd open_file(const std::string& path, int flags, const std::string& what, int mode) {
  const int fd = ::open(path.c_str(), flags | O_CLOEXEC, mode);
  if (fd < 0) throw_write_error(path, what, errno);
  return UniqueFd(fd);
}

void write_all(int fd, const std::string& path, const void* data, size_t size) {
  const char* p = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t n = ::write(fd, p, std::min<size_t>(size, size_t{1} << 30));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_write_error(path, "write", errno);
    }
    p += n;
    size -= static_cast<size_t>(n);
  }
}

void fsync_directory(const std::string& dir) {
  const UniqueFd fd = open_file(dir.empty() ? "." : dir, O_RDONLY | O_DIRECTORY, "open the directory to fsync it");
  // Some file systems (and a few network ones) refuse fsync on a directory: the rename has happened; only its
  // durability across a power cut is then up to them.
  if (::fsync(fd.get()) != 0 && errno != EINVAL && errno != EROFS)
    throw_write_error(dir, "fsync of the directory", errno);
}

void rename_durably(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0) throw_write_error(to, "rename from " + from, errno);
  fsync_directory(std::filesystem::path(to).parent_path().string());
}

std::string read_text_file(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status status = fs::status(path, ec);
  if (status.type() == fs::file_type::not_found)
    throw IoError(path + ": no such file", "check the path (relative paths start in the current directory)");
  if (status.type() == fs::file_type::directory)
    throw IoError(path + ": is a directory, not a file", "give the file itself (or the directory that holds it)");
  const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd.valid())
    throw IoError(path + ": cannot open for reading: " + std::strerror(errno), "check the file's permissions");
  std::string text;
  char buffer[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
    if (n == 0) break;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0)
      throw IoError(path + ": reading failed part-way: " + std::strerror(errno), "check the file and its disk");
    text.append(buffer, static_cast<size_t>(n));
  }
  return text;
}

std::string listed_file_problem(const std::string& path, uint64_t bytes, const std::string& fnv1a64,
                                const std::string& listed_in) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const bool file = fs::is_regular_file(path, ec);
  const uintmax_t size = file ? fs::file_size(path, ec) : 0;
  if (!file || ec) return "is missing (or not a file)";
  if (size != bytes) return "has " + std::to_string(size) + " bytes, " + listed_in + " says " + std::to_string(bytes);
  if (!fnv1a64.empty() && hex64(fnv1a64_file(path)) != fnv1a64)
    return "does not have the checksum " + listed_in + " records (its content changed)";
  return "";
}

std::string path_inside(const std::string& dir, const std::string& entry, const std::string& listed_in) {
  namespace fs = std::filesystem;
  const auto refuse = [&](const std::string& why) {
    throw IoError(listed_in + ": entry \"" + entry + "\" " + why + "; its entries must name files inside " + dir,
                  "the file is damaged or was not written by joule: remake it (or restore it from the tool that "
                  "wrote it)");
  };
  const fs::path e(entry);
  if (entry.empty()) refuse("is empty");
  if (e.is_absolute()) refuse("is an absolute path");
  for (const fs::path& part : e)
    if (part == "..") refuse("climbs out with \"..\"");
  const fs::path full = fs::path(dir) / e;
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(full, ec))) return full.string();
  const fs::path real = fs::weakly_canonical(full, ec), root = fs::weakly_canonical(dir, ec);
  if (ec) refuse("cannot be resolved (" + ec.message() + ")");
  auto r = real.begin();
  for (auto d = root.begin(); d != root.end(); ++d, ++r)
    if (d->empty())
      break;  // a trailing separator
    else if (r == real.end() || *r != *d)
      refuse("resolves to " + real.string() + ", outside it");
  return full.string();
}

void check_replaceable(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return;
    throw_write_error(path, "lstat", errno);
  }
  if (S_ISREG(st.st_mode)) return;
  const char* kind = S_ISDIR(st.st_mode)    ? "a directory"
                     : S_ISLNK(st.st_mode)  ? "a symbolic link"
                     : S_ISCHR(st.st_mode)  ? "a character device"
                     : S_ISBLK(st.st_mode)  ? "a block device"
                     : S_ISFIFO(st.st_mode) ? "a FIFO"
                     : S_ISSOCK(st.st_mode) ? "a socket"
                                            : "not a regular file";
  throw IoError(path + ": is " + kind + "; joule writes its outputs as regular files and replaces nothing else",
                "give the path of a new file (or of a regular file to replace)");
}

namespace {

// The temporary file beside `path`, opened for writing. Errors name `path` as the user gave it (not the temporary
// name) and say what is wrong with the place: an empty path, a directory that does not exist or is not one.
UniqueFd open_temporary(const std::string& path, const std::string& tmp) {
  namespace fs = std::filesystem;
  if (path.empty()) throw IoError("an empty output path", "give the file to write");
  check_replaceable(path);
  const fs::path parent = fs::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty() && !fs::is_directory(parent, ec))
    throw IoError(path + ": cannot write: " + parent.string() +
                      (fs::exists(parent, ec) ? " is not a directory" : " does not exist"),
                  "create the directory first, or write somewhere else");
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    throw IoError(path + ": cannot write (creating " + tmp + " beside it failed: " + std::strerror(err) + ")",
                  write_failure_hint(err));
  }
  return UniqueFd(fd);
}

}  // namespace

AtomicFile::AtomicFile(std::string path)
    : path_(std::move(path)), tmp_(path_ + ".tmp." + std::to_string(::getpid())), fd_(open_temporary(path_, tmp_)) {}

AtomicFile::~AtomicFile() {
  if (fd_.valid()) {
    fd_.reset();
    ::unlink(tmp_.c_str());
  }
}

void AtomicFile::write(const void* data, size_t size) {
  if (!fd_.valid()) throw InternalError(tmp_ + ": written after commit");
  write_all(fd_.get(), tmp_, data, size);
}

void AtomicFile::commit() {
  try {
    if (::fsync(fd_.get()) != 0) throw_write_error(tmp_, "fsync", errno);
    fd_.close_checked(tmp_);
    check_replaceable(path_);  // again: something may have appeared at the path while the file was written
    rename_durably(tmp_, path_);
  } catch (...) {
    fd_.reset();
    ::unlink(tmp_.c_str());
    throw;
  }
}

void write_file_atomically(const std::string& path, const std::string& bytes) {
  AtomicFile file(path);
  file.write(bytes);
  file.commit();
}

std::optional<FileLock> FileLock::try_acquire(const std::string& path) {
  UniqueFd fd = open_file(path, O_RDWR | O_CREAT, "open the lock file");
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  if (::fcntl(fd.get(), F_SETLK, &fl) == 0) return FileLock(path, std::move(fd));
  const int err = errno;
  if (err == EACCES || err == EAGAIN) return std::nullopt;
  throw IoError(
      path + ": cannot lock: " + std::strerror(err) + " (the file system does not support POSIX locks)",
      "mount the file system with locking (NFS: lockd/NFSv4; Lustre: -o flock) or use a local or lock-capable "
      "directory");
}

bool FileLock::still_at_path() const {
  struct stat by_fd {
  }, by_path{};
  return ::fstat(fd_.get(), &by_fd) == 0 && ::stat(path_.c_str(), &by_path) == 0 && by_fd.st_ino == by_path.st_ino &&
         by_fd.st_dev == by_path.st_dev;
}

std::string FileLock::read_text(int fd) {
  char buf[512] = {0};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string s = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

void FileLock::replace_text(const std::string& text) {
  if (::ftruncate(fd_.get(), 0) != 0) throw_write_error(path_, "truncate", errno);
  if (::pwrite(fd_.get(), text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()))
    throw_write_error(path_, "write", errno);
}

LineLog::LineLog(std::string path)
    : path_(std::move(path)), fd_(open_file(path_, O_RDWR | O_CREAT | O_APPEND, "open for appending")) {
  struct stat st {};
  if (::fstat(fd_.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) return;  // a device: nothing to cut
  // Back from the end to the last newline, a block at a time.
  const off_t size = st.st_size;
  off_t keep = 0;
  char block[4096];
  for (off_t end = size; end > 0 && keep == 0;) {
    const off_t start = std::max<off_t>(0, end - static_cast<off_t>(sizeof block));
    const ssize_t n = ::pread(fd_.get(), block, static_cast<size_t>(end - start), start);
    if (n != end - start) throw_write_error(path_, "read back the end", n < 0 ? errno : EIO);
    for (ssize_t i = n - 1; i >= 0; --i)
      if (block[i] == '\n') {
        keep = start + i + 1;
        break;
      }
    if (end == size && keep == size) return;  // ends with a complete line
    end = start;
  }
  if (::ftruncate(fd_.get(), keep) != 0) throw_write_error(path_, "truncate the partial last line", errno);
  cut_bytes_ = static_cast<int64_t>(size - keep);
}

void LineLog::write_line(const std::string& line) {
  const std::string text = line + "\n";
  write_all(fd_.get(), path_, text.data(), text.size());
}

}  // namespace joule
