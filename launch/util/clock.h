// Elapsed time on the steady clock, for every timer in joule (progress lines, step timing, benchmarks).
#pragma once

#include <chrono>

namespace joule::launch {

// Seconds of steady-clock time since `start`.
inline double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace joule::launch
