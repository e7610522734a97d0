#include "trainer/run_lock.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <utility>

#include "launch/util/file_io.h"
#include "trainer/cost/accounting.h"

namespace joule::trainer {
namespace fs = std::filesystem;
namespace {

std::string host_name() {
  char buf[256] = {0};
  if (::gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

}  // namespace

RunLock RunLock::acquire(const std::string& run_dir, std::string* previous) {
  std::error_code ec;
  if (run_dir.empty())
    throw RunLockError("run.dir (--run-dir) is empty", "give --run-dir the directory for the run's files");
  if (fs::exists(run_dir, ec) && !fs::is_directory(run_dir, ec))
    throw RunLockError(run_dir + ": exists and is not a directory",
                       "give --run-dir a directory (it is created if missing)");
  RunLock lock;
  lock.created_dir_ = !fs::exists(run_dir, ec);
  if (lock.created_dir_) lock.dir_ = run_dir;
  fs::create_directories(run_dir, ec);
  if (ec) throw_write_error(run_dir, "creating the run directory", ec.value());
  lock.path_ = (fs::path(run_dir) / ".joule.lock").string();
  // A finished job unlinks the file: lock, then check that the path still names the locked file (another job may
  // have unlinked it between our open and our lock); if not, start over on the new file.
  for (int attempt = 0;; ++attempt) {
    std::optional<FileLock> held;
    try {
      held = FileLock::try_acquire(lock.path_);
    } catch (const joule::IoError& e) {
      lock.created_dir_ = false;
      throw RunLockError(e.what(), e.hint());
    }
    if (!held) {
      const UniqueFd fd(::open(lock.path_.c_str(), O_RDONLY | O_CLOEXEC));
      const std::string holder = fd ? FileLock::read_text(fd.get()) : "";
      lock.created_dir_ = false;
      throw RunLockError(
          run_dir + " is in use by another joule train (" + (holder.empty() ? "holder unknown" : holder) + ")",
          "two jobs on one run directory would mix their metrics and checkpoints: wait for that job, stop it, or "
          "use another --run-dir");
    }
    if (held->still_at_path()) {
      lock.lock_ = std::move(held);
      break;
    }
    if (attempt == 10)
      throw RunLockError(lock.path_ + ": keeps being replaced while locking",
                         "another process is recreating the lock file");
  }
  const std::string before = FileLock::read_text(lock.lock_->fd());
  if (previous && !before.empty())
    *previous = "the previous job on this run directory (" + before +
                ") ended without releasing its lock (killed?); it no longer "
                "holds it, so this job takes it over";
  lock.lock_->replace_text("host " + host_name() + " pid " + std::to_string(::getpid()) + " started " +
                           cost::utc_now_iso() + "\n");
  return lock;
}

RunLock::~RunLock() {
  if (!lock_) return;
  // Unlinked while still locked, so that no record of a job that ended is left; a killed job cannot do this, and its
  // file's text is what the next job reports. A run directory this lock created and nothing else filled goes too.
  ::unlink(lock_->path().c_str());
  lock_.reset();
  if (created_dir_) ::rmdir(dir_.c_str());
}

}  // namespace joule::trainer
