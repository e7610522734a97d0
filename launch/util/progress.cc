#include "launch/util/progress.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "launch/util/clock.h"
#include "launch/util/format.h"

namespace joule {
namespace {

constexpr double kTerminalInterval = 0.25;  // seconds between a terminal line's updates
constexpr double kLogInterval = 30;         // seconds a log waits at most for its next line

}  // namespace

Progress::Progress(std::string what, Unit unit, int64_t total, bool quiet, Style style, std::FILE* out)
    : what_(std::move(what)),
      unit_(unit),
      total_(total),
      quiet_(quiet),
      terminal_(style == Style::terminal || (style == Style::automatic && ::isatty(::fileno(out)) == 1)),
      out_(out),
      start_(std::chrono::steady_clock::now()),
      last_print_(start_) {}

Progress::~Progress() {
  if (line_open_) std::fputc('\n', out_);
}

std::string Progress::amount(double n) const {
  switch (unit_) {
    case Unit::bytes: {
      const double a = std::fabs(n);
      if (a >= 1e9) return readable(n / 1e9) + " GB";
      if (a >= 1e6) return readable(n / 1e6) + " MB";
      if (a >= 1e3) return readable(n / 1e3) + " kB";
      return grouped(n) + " bytes";
    }
    case Unit::lines:
      return grouped(n) + " lines";
    case Unit::shards:
      return readable(n) + " shards";
  }
  return grouped(n);
}

std::string Progress::text(int64_t done, double seconds) const {
  const double d = static_cast<double>(done);
  std::string t = amount(d);
  if (total_ > 0)
    t += " of " + amount(static_cast<double>(total_)) + " (" +
         format_number("%.0f", std::floor(100 * std::min(1.0, d / static_cast<double>(total_)))) + " %)";
  if (seconds > 0 && done > 0) {
    const double rate = d / seconds;
    t += ", " + amount(rate) + "/s";
    const double left = total_ > done ? static_cast<double>(total_ - done) / rate : 0;
    if (left >= 1) t += ", " + duration_text(left) + " left";
  }
  return t;
}

void Progress::print(const std::string& line) {
  if (terminal_) {
    std::fprintf(out_, "\r\033[K%s: %s", what_.c_str(), line.c_str());
    line_open_ = true;
  } else {
    std::fprintf(out_, "%s: %s\n", what_.c_str(), line.c_str());
  }
  std::fflush(out_);
  last_print_ = std::chrono::steady_clock::now();
}

void Progress::set(int64_t done) {
  done_ = done;
  if (quiet_ || finished_) return;
  const double quiet_for = launch::seconds_since(last_print_);
  bool due = false;
  if (terminal_) {
    due = quiet_for >= kTerminalInterval;
  } else {
    const int tenth = total_ > 0 ? static_cast<int>(std::min<int64_t>(10, done * 10 / total_)) : 0;
    due = (tenth > last_tenth_ && tenth < 10) || quiet_for >= kLogInterval;  // the end: finish()
    last_tenth_ = std::max(last_tenth_, tenth);
  }
  if (due) print(text(done, launch::seconds_since(start_)));
}

void Progress::finish() {
  if (quiet_ || finished_ || done_ == 0) return;  // nothing done (already complete): nothing to say
  finished_ = true;
  const double seconds = launch::seconds_since(start_);
  std::string line = "done, " + amount(static_cast<double>(done_)) + " in " + duration_text(seconds);
  if (seconds > 0) line += " (" + amount(static_cast<double>(done_) / seconds) + "/s)";
  print(line);
  if (terminal_) std::fputc('\n', out_), line_open_ = false;
}

}  // namespace joule
