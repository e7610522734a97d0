// One error model for every joule library: joule::Error carries the message (what went wrong, naming the file,
// key or value), a "what to do" hint, and a kind that decides the exit code: usage (2: the command line or the run
// config asks for something invalid) or runtime (1: data, files, the environment, a failure during the run).
// Every library's error type derives from it, with its own default hint; `main` prints message and hint and exits
// with exit_code() on every rank. Header only, no LibTorch: every library includes it.
#pragma once

#include <stdexcept>
#include <string>
#include <utility>

namespace joule {

enum class ErrorKind { usage, runtime };

class Error : public std::runtime_error {
 public:
  Error(const std::string& message, std::string hint, ErrorKind kind = ErrorKind::runtime)
      : std::runtime_error(message), hint_(std::move(hint)), kind_(kind) {}
  const std::string& hint() const noexcept { return hint_; }
  ErrorKind kind() const noexcept { return kind_; }
  int exit_code() const noexcept { return kind_ == ErrorKind::usage ? 2 : 1; }

 private:
  std::string hint_;
  ErrorKind kind_;
};

// The command line is wrong: an unknown command, a missing or invalid flag value.
class UsageError : public Error {
 public:
  explicit UsageError(const std::string& message,
                      std::string hint = "see `joule COMMAND --help` for the flags and their values")
      : Error(message, std::move(hint), ErrorKind::usage) {}
};

// A file could not be read or written (the message names it and the cause).
class IoError : public Error {
 public:
  explicit IoError(const std::string& message, std::string hint = "check the path, its permissions and the free space")
      : Error(message, std::move(hint)) {}
};

// An invariant of joule itself does not hold: a bug.
class InternalError : public Error {
 public:
  explicit InternalError(const std::string& message)
      : Error(message, "this is a bug in joule: please report it with the command line and this message") {}
};

}  // namespace joule
