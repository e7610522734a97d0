// One number through a printf format ("%.3g", "%+.1f %%"): how joule's tables, reports and log lines format their
// figures. No LibTorch.
#pragma once

#include <cstdio>
#include <string>

namespace joule {

inline std::string format_number(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

}  // namespace joule
