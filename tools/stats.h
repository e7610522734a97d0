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

}  // namespace joule::tools
