// How far a long command has got, on stderr, the same way for every command (`data create`, `data vocab`,
// `data pack`, `infer`): on a terminal one line that updates in place, at most four times a second; in a log (not a
// terminal) one line at each tenth of the work, or every 30 s when the total is unknown or a tenth takes longer, so a
// half-hour run over a 20 GB corpus is never silent. Each line says what is done of what, the rate and the time left;
// the last says the whole and its mean rate. Quiet: nothing. No LibTorch.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace joule {

class Progress {
 public:
  enum class Unit { bytes, lines, shards };
  enum class Style { automatic, terminal, log };  // automatic: terminal when `out` is one
  // `what` leads each line ("data create"); `total` <= 0: unknown (no share, no time left) or told later by set().
  Progress(std::string what, Unit unit, int64_t total, bool quiet, Style style = Style::automatic,
           std::FILE* out = stderr);
  ~Progress();  // ends a terminal's line if finish() was not called (an error is about to be printed)
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  void set(int64_t done);                  // one caller at a time
  void set(int64_t done, int64_t total) {  // the work tells its total as it goes (<= 0: unknown)
    total_ = total;
    set(done);
  }
  void add(int64_t n) { set(done_ + n); }
  void finish();  // the last line: all done, in how long, at what rate
  int64_t done() const { return done_; }

  // "312 MB of 1.1 GB (28 %), 45 MB/s, 17 s left" for `done` after `seconds`.
  std::string text(int64_t done, double seconds) const;

 private:
  std::string amount(double n) const;  // "312 MB", "1,200 lines", "3 shards"
  void print(const std::string& line);

  std::string what_;
  Unit unit_;
  int64_t total_;
  bool quiet_, terminal_;
  std::FILE* out_;
  std::chrono::steady_clock::time_point start_, last_print_;
  int64_t done_ = 0;
  int last_tenth_ = 0;
  bool line_open_ = false, finished_ = false;
};

}  // namespace joule
