#include "trainer/run_lock.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>

#include "launch/file_io.h"
#include "trainer/cost/accounting.h"

namespace joule::trainer {
namespace fs = std::filesystem;
namespace {

std::string host_name() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

// The lock file's text: "host H pid P started T".
std::string read_holder(int fd) {
  char buf[512] = {0};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string s = n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.pop_back();
  return s;
}

}  // namespace

RunLock RunLock::acquire(const std::string& run_dir, std::string* previous) {
  std::error_code ec;
  if (fs::exists(run_dir, ec) && !fs::is_directory(run_dir, ec))
    throw RunLockError(run_dir + ": exists and is not a directory", "give --run-dir a directory (it is created if missing)");
  RunLock lock;
  lock.created_dir_ = !fs::exists(run_dir, ec);
  if (lock.created_dir_) lock.dir_ = run_dir;
  fs::create_directories(run_dir, ec);
  if (ec) throw_write_error(run_dir, "creating the run directory", ec.value());
  lock.path_ = (fs::path(run_dir) / ".joule.lock").string();
  // A finished job unlinks the file: lock, then check that the path still names the locked file (another job may
  // have unlinked it between our open and our lock); if not, start over on the new file.
  for (int attempt = 0;; ++attempt) {
    // The descriptor joins `lock` only once locked: a job that fails to lock must never unlink the holder's file.
    const int fd = ::open(lock.path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) throw_write_error(lock.path_, "open", errno);
    struct flock fl {};
    fl.l_type = F_WRLCK;
    fl.l_whence = SEEK_SET;
    if (::fcntl(fd, F_SETLK, &fl) != 0) {
      const int err = errno;
      const std::string holder = read_holder(fd);
      ::close(fd);
      lock.created_dir_ = false;
      if (err == EACCES || err == EAGAIN)
        throw RunLockError(run_dir + " is in use by another joule train (" + (holder.empty() ? "holder unknown" : holder) + ")",
                           "two jobs on one run directory would mix their metrics and checkpoints: wait for that job, stop it, or "
                           "use another --run-dir");
      throw RunLockError(lock.path_ + ": cannot lock: " + std::strerror(err) + " (the file system does not support POSIX locks)",
                         "mount the run directory's file system with locking (NFS: lockd/NFSv4; Lustre: -o flock) or use a local "
                         "or lock-capable directory for --run-dir");
    }
    struct stat by_fd {}, by_path {};
    if (::fstat(fd, &by_fd) == 0 && ::stat(lock.path_.c_str(), &by_path) == 0 && by_fd.st_ino == by_path.st_ino &&
        by_fd.st_dev == by_path.st_dev) {
      lock.fd_ = fd;
      break;
    }
    ::close(fd);
    if (attempt == 10) throw RunLockError(lock.path_ + ": keeps being replaced while locking", "another process is recreating the lock file");
  }
  const std::string before = read_holder(lock.fd_);
  if (previous && !before.empty())
    *previous = "the previous job on this run directory (" + before + ") ended without releasing its lock (killed?); it no longer "
                "holds it, so this job takes it over";
  const std::string me = "host " + host_name() + " pid " + std::to_string(::getpid()) + " started " + utc_now_iso() + "\n";
  if (::ftruncate(lock.fd_, 0) != 0) throw_write_error(lock.path_, "truncate", errno);
  if (::pwrite(lock.fd_, me.data(), me.size(), 0) != static_cast<ssize_t>(me.size())) throw_write_error(lock.path_, "write", errno);
  return lock;
}

RunLock::~RunLock() {
  if (fd_ < 0) return;
  // Unlinked while still locked, so that no record of a job that ended is left; a killed job cannot do this, and its
  // file's text is what the next job reports. A run directory this lock created and nothing else filled goes too.
  ::unlink(path_.c_str());
  ::close(fd_);
  if (created_dir_) ::rmdir(dir_.c_str());
}

RunLock::RunLock(RunLock&& o) noexcept
    : path_(std::move(o.path_)), dir_(std::move(o.dir_)), fd_(std::exchange(o.fd_, -1)), created_dir_(o.created_dir_) {}

RunLock& RunLock::operator=(RunLock&& o) noexcept {
  std::swap(path_, o.path_);
  std::swap(dir_, o.dir_);
  std::swap(fd_, o.fd_);
  std::swap(created_dir_, o.created_dir_);
  return *this;
}

}  // namespace joule::trainer
