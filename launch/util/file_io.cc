#include "launch/util/file_io.h"
#include "launch/util/hash.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>

namespace joule {
namespace {

// The registry of temporaries in flight: fixed slots, so that a signal handler can read it without allocating.
struct TemporarySlot {
  std::atomic<int> state{0};  // 0 free, 1 being filled, 2 ready
  bool directory = false;
  char path[4096] = {0};
};
TemporarySlot g_temporaries[64];

int register_temporary(const std::string& path, bool directory) {
  if (path.size() >= sizeof g_temporaries[0].path) return -1;
  for (int i = 0; i < 64; ++i) {
    int expected = 0;
    if (!g_temporaries[i].state.compare_exchange_strong(expected, 1)) continue;
    g_temporaries[i].directory = directory;
    std::memcpy(g_temporaries[i].path, path.c_str(), path.size() + 1);
    g_temporaries[i].state.store(2);
    return i;
  }
  return -1;  // more than 64 at once: the error path and a rerun still remove it
}

void release_temporary(int slot) {
  if (slot >= 0) g_temporaries[slot].state.store(0);
}

// Removes a flat directory (its files, then itself) with calls a signal handler may make: the entries are read with
// the getdents64 system call into a buffer on the stack. (fdopendir allocates its DIR with malloc: a signal that
// arrived while its thread was inside malloc then waited for the lock that thread held, and the process hung.)
void remove_flat_directory(const char* path) {
  const int dir = ::open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (dir >= 0) {
    alignas(struct dirent64) char buffer[8192];
    // Entries removed while the directory is read may shift the ones not read yet: read it again until a pass
    // finds nothing left to remove (a few passes at most; rmdir below fails harmlessly if some remain).
    for (int pass = 0; pass < 8; ++pass) {
      bool removed = false;
      ::lseek(dir, 0, SEEK_SET);
      for (ssize_t n; (n = ::getdents64(dir, buffer, sizeof buffer)) > 0;)
        for (ssize_t at = 0; at < n;) {
          const auto* e = reinterpret_cast<const struct dirent64*>(buffer + at);
          if (std::strcmp(e->d_name, ".") != 0 && std::strcmp(e->d_name, "..") != 0)
            removed |= ::unlinkat(dir, e->d_name, 0) == 0;
          at += e->d_reclen;
        }
      if (!removed) break;
    }
    ::close(dir);
  }
  ::rmdir(path);
}

void remove_temporaries_and_die(int sig) {
  for (TemporarySlot& t : g_temporaries) {
    if (t.state.load() != 2) continue;
    if (t.directory)
      remove_flat_directory(t.path);
    else
      ::unlink(t.path);
  }
  std::signal(sig, SIG_DFL);
  std::raise(sig);
}

}  // namespace

void remove_temporaries_on_signals() {
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) std::signal(sig, remove_temporaries_and_die);
  // A write past RLIMIT_FSIZE fails with EFBIG (named with the file) instead of killing the process with SIGXFSZ.
  std::signal(SIGXFSZ, SIG_IGN);
}

int remove_stale_temporaries(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  const fs::path parent = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  const std::string prefix = p.filename().string() + ".tmp.";
  std::error_code ec;
  int removed = 0;
  for (const auto& e : fs::directory_iterator(parent, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string pid = name.substr(prefix.size());
    if (pid.empty() || pid.size() > 9 || pid.find_first_not_of("0123456789") != std::string::npos) continue;
    const long n = std::stol(pid);
    if (n == ::getpid() || ::kill(static_cast<pid_t>(n), 0) == 0 || errno != ESRCH) continue;
    std::error_code rm;
    if (fs::remove_all(e.path(), rm) > 0) ++removed;
  }
  return removed;
}

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
    case EFBIG:
      return "the file is larger than this process may write (the shell's `ulimit -f`, or the file system's limit): "
             "raise the limit or write elsewhere";
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
  refuse_special_input(path);
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

std::string path_for_file(const std::string& path, const std::string& file) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty() || !fs::exists(path, ec)) return path;  // a preset's name
  const fs::path dir =
      fs::absolute(fs::path(file).parent_path().empty() ? fs::path(".") : fs::path(file).parent_path());
  const fs::path rel = fs::relative(fs::absolute(path), dir, ec);
  return ec || rel.empty() ? fs::absolute(path).lexically_normal().string() : rel.string();
}

std::string path_from_file(const std::string& entry, const std::string& file) {
  namespace fs = std::filesystem;
  if (entry.empty() || fs::path(entry).is_absolute()) return entry;
  const fs::path dir = fs::path(file).parent_path();
  const fs::path there = dir / entry;
  std::error_code ec;
  const bool bare = entry.find('/') == std::string::npos;
  if (bare && !fs::exists(there, ec)) return entry;
  return there.lexically_normal().string();
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
  if (!path_within(real.string(), root.string())) refuse("resolves to " + real.string() + ", outside it");
  return full.string();
}

bool path_within(const std::string& path, const std::string& dir) {
  const std::filesystem::path p(path), d(dir);
  auto a = p.begin();
  for (auto b = d.begin(); b != d.end(); ++b, ++a)
    if (b->empty())
      break;  // a trailing separator
    else if (a == p.end() || *a != *b)
      return false;
  return true;
}

namespace {

const char* file_kind(unsigned mode) {
  return S_ISREG(mode)    ? "a regular file"
         : S_ISDIR(mode)  ? "a directory"
         : S_ISLNK(mode)  ? "a symbolic link"
         : S_ISCHR(mode)  ? "a character device"
         : S_ISBLK(mode)  ? "a block device"
         : S_ISFIFO(mode) ? "a FIFO"
         : S_ISSOCK(mode) ? "a socket"
                          : "not a regular file";
}

}  // namespace

std::string file_kind_at(const std::string& path) {
  struct stat st {};
  return ::lstat(path.c_str(), &st) == 0 ? file_kind(st.st_mode) : "";
}

void refuse_special_input(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) return;
  throw IoError(path + ": is " + file_kind(st.st_mode) +
                    "; joule reads its inputs from regular files (a pipe or a device could block it for good)",
                "give the path of a regular file");
}

void check_replaceable(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return;
    throw_write_error(path, "lstat", errno);
  }
  if (S_ISREG(st.st_mode)) return;
  const char* kind = file_kind(st.st_mode);
  throw IoError(path + ": is " + kind + "; joule writes its outputs as regular files and replaces nothing else",
                "give the path of a new file (or of a regular file to replace)");
}

namespace {

// An output's directory must be there (errors name the output as the user gave it, not a temporary beside it).
void check_parent_directory(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path parent = fs::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty() && !fs::is_directory(parent, ec))
    throw IoError(path + ": cannot write: " + parent.string() +
                      (fs::exists(parent, ec) ? " is not a directory" : " does not exist"),
                  "create the directory first, or write somewhere else");
}

// The temporary file beside `path`, opened for writing. Errors name `path` as the user gave it (not the temporary
// name) and say what is wrong with the place: an empty path, a directory that does not exist or is not one.
UniqueFd open_temporary(const std::string& path, const std::string& tmp) {
  namespace fs = std::filesystem;
  if (path.empty()) throw IoError("an empty output path", "give the file to write");
  check_replaceable(path);
  check_parent_directory(path);
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    const int err = errno;
    throw IoError(path + ": cannot write (creating " + tmp + " beside it failed: " + std::strerror(err) + ")",
                  write_failure_hint(err));
  }
  return UniqueFd(fd);
}

}  // namespace

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)), tmp_(path_ + ".tmp." + std::to_string(::getpid())) {
  if (!path_.empty()) remove_stale_temporaries(path_);
  slot_ = register_temporary(tmp_, false);
  try {
    fd_ = open_temporary(path_, tmp_);
  } catch (...) {
    release_temporary(slot_);
    throw;
  }
}

AtomicFile::~AtomicFile() {
  if (fd_.valid()) {
    fd_.reset();
    ::unlink(tmp_.c_str());
  }
  release_temporary(slot_);
}

void AtomicFile::write(const void* data, size_t size) {
  if (!fd_.valid()) throw InternalError(path_ + ": written after commit");
  write_all(fd_.get(), path_, data, size);  // errors name the output, not its temporary
}

void AtomicFile::commit() {
  try {
    if (::fsync(fd_.get()) != 0) throw_write_error(path_, "fsync", errno);
    fd_.close_checked(path_);
    check_replaceable(path_);  // again: something may have appeared at the path while the file was written
    rename_durably(tmp_, path_);
  } catch (...) {
    fd_.reset();
    ::unlink(tmp_.c_str());
    release_temporary(slot_);
    slot_ = -1;
    throw;
  }
  release_temporary(slot_);
  slot_ = -1;
}

StagedDirectory::StagedDirectory(std::string out) : out_(std::move(out)) {
  namespace fs = std::filesystem;
  while (out_.size() > 1 && out_.back() == '/') out_.pop_back();
  tmp_ = out_ + ".tmp." + std::to_string(::getpid());
  remove_stale_temporaries(out_);
  check_parent_directory(out_);
  std::error_code ec;
  fs::remove_all(tmp_, ec);
  slot_ = register_temporary(tmp_, true);
  if (::mkdir(tmp_.c_str(), 0755) != 0) {
    const int err = errno;
    release_temporary(slot_);
    throw IoError(out_ + ": cannot write (creating " + tmp_ + " beside it failed: " + std::strerror(err) + ")",
                  write_failure_hint(err));
  }
}

StagedDirectory::~StagedDirectory() {
  if (!committed_) {
    std::error_code ec;
    std::filesystem::remove_all(tmp_, ec);
  }
  release_temporary(slot_);
}

void StagedDirectory::commit() {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string old = out_ + ".old-" + std::to_string(::getpid());
  const bool had_old = fs::exists(fs::symlink_status(out_, ec));
  if (had_old) rename_durably(out_, old);
  rename_durably(tmp_, out_);
  committed_ = true;
  if (had_old) fs::remove_all(old, ec);
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

LineLog::LineLog(std::string path) : path_(std::move(path)) {
  check_replaceable(path_);  // a FIFO there would stall the run once the pipe is full; a link would write elsewhere
  fd_ = open_file(path_, O_RDWR | O_CREAT | O_APPEND | O_NOFOLLOW | O_NONBLOCK, "open for appending");
  struct stat st {};
  if (::fstat(fd_.get(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size == 0) return;
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
