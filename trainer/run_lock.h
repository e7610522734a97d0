// One `joule train` per run directory: RUN/.joule.lock, an exclusive POSIX record lock (fcntl F_SETLK) taken by rank 0
// before anything in RUN is written and held until the process exits; a job that ends (normally or with an error)
// unlinks the file. The kernel releases the lock when the holder dies (kill -9 included), so a lock left by a dead job
// never blocks; the file's text (host, pid, start time) names the holder for the second job's error and, when the
// holder has died, the previous job for a notice.
//
// Why a POSIX record lock: it is the lock NFS carries to the server (NLM for NFSv3, built into NFSv4) and the one
// Lustre and GPFS honour when mounted with locking (Lustre: -o flock); flock(2) is emulated with it on NFS anyway.
// A file system without lock support makes the lock fail with ENOLCK/ENOSYS: that is an error naming the file
// system, not a silent run without a lock. No LibTorch.
#pragma once

#include <optional>
#include <string>
#include <utility>

#include "launch/util/file_io.h"

namespace joule::trainer {

class RunLockError : public joule::Error {
 public:
  RunLockError(const std::string& message, std::string hint) : joule::Error(message, std::move(hint)) {}
};

class RunLock {
 public:
  // Creates RUN if needed and takes the lock. Throws RunLockError naming the holder when another process holds it.
  // `previous` (optional): set to a note when the lock file names a job that has since died.
  static RunLock acquire(const std::string& run_dir, std::string* previous = nullptr);

  RunLock() = default;
  ~RunLock();
  RunLock(RunLock&& o) noexcept
      : path_(std::move(o.path_)),
        dir_(std::move(o.dir_)),
        lock_(std::exchange(o.lock_, std::nullopt)),
        created_dir_(std::exchange(o.created_dir_, false)) {}
  RunLock& operator=(RunLock&& o) noexcept {
    std::swap(path_, o.path_);
    std::swap(dir_, o.dir_);
    std::swap(lock_, o.lock_);
    std::swap(created_dir_, o.created_dir_);
    return *this;
  }

  bool held() const { return lock_.has_value(); }
  const std::string& path() const { return path_; }

 private:
  std::string path_, dir_;
  std::optional<FileLock> lock_;
  bool created_dir_ = false;  // removed again at release when nothing else was written into it
};

}  // namespace joule::trainer
