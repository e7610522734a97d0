// Small statistics shared by the benchmarks.
#pragma once

#include <algorithm>
#include <vector>

namespace joule::tools {

// The median (mean of the middle two for an even count); `v` must not be empty.
inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The q-quantile (0 <= q <= 1), interpolated between the two nearest order statistics; `v` must not be empty. The
// p50/p90/p99 latencies of `joule bench infer` and `joule bench serve` both come from it.
inline double percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const double pos = q * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (pos - static_cast<double>(lo)) * (v[hi] - v[lo]);
}

}  // namespace joule::tools
