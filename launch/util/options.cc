#include "launch/util/options.h"

#include <cmath>
#include <cstdio>

namespace joule {

bool OptionRange::contains(double v) const {
  return std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
}

std::string option_number_text(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string OptionRange::text() const {
  auto end = [](double v) { return std::isinf(v) ? std::string(v < 0 ? "-inf" : "inf") : option_number_text(v); };
  return std::string(lo_open ? "(" : "[") + end(lo) + ", " + end(hi) + (hi_open || std::isinf(hi) ? ")" : "]");
}

const char* option_type_name(const OptionTarget& t) {
  return std::holds_alternative<int64_t*>(t)  ? "an integer"
         : std::holds_alternative<double*>(t) ? "a number"
                                              : "a string";
}

double option_number(const OptionTarget& t) {
  if (const auto* i = std::get_if<int64_t*>(&t)) return static_cast<double>(**i);
  if (const auto* d = std::get_if<double*>(&t)) return **d;
  throw InternalError("option_number of a string option");
}

void check_option_ranges(const std::string& table, const std::vector<OptionField>& fields) {
  for (const OptionField& f : fields) {
    if (!f.range) continue;
    const double v = option_number(f.target);
    if (f.range->contains(v)) continue;
    throw ConfigError(
        "run config: " + table + "." + f.name + " = " + option_number_text(v) +
        (std::isfinite(v) ? " is outside " + f.range->text() : " is not a finite number; valid: " + f.range->text()) +
        (f.note[0] ? std::string(" (") + f.note + ")" : ""));
  }
}

void check_option_choice(const std::string& table, const char* name, const std::string& value,
                         const std::vector<std::string>& valid) {
  std::string list;
  for (const std::string& v : valid) {
    if (v == value) return;
    list += (list.empty() ? "" : ", ") + v;
  }
  throw ConfigError("run config: " + table + "." + name + " is \"" + value + "\"; valid values: " + list);
}

}  // namespace joule
