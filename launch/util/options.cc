#include "launch/util/options.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>

namespace joule {

bool OptionRange::contains(double v) const {
  return std::isfinite(v) && (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
}

std::optional<double> parse_number_text(const std::string& text) {
  double v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return v;
}

std::string toml_syntax_problem(const std::string& message, const std::string& where) {
  std::string first = message.substr(0, message.find('\n'));
  if (first.rfind("[error] ", 0) == 0) first.erase(0, 8);
  if (const size_t colon = first.find(": "); first.rfind("toml::", 0) == 0 && colon != std::string::npos)
    first.erase(0, colon + 2);
  while (!first.empty() && (first.back() == '.' || first.back() == ' ')) first.pop_back();
  std::string line;  // the first source line the message quotes: " 12 | text"
  for (size_t at = message.find('\n'); at != std::string::npos && line.empty(); at = message.find('\n', at + 1)) {
    size_t p = at + 1;
    while (p < message.size() && message[p] == ' ') ++p;
    size_t digits = p;
    while (digits < message.size() && std::isdigit(static_cast<unsigned char>(message[digits]))) ++digits;
    if (digits > p && message.compare(digits, 3, " | ") == 0) line = message.substr(p, digits - p);
  }
  return where + ": " + (line.empty() ? "" : "line " + line + ": ") + "TOML syntax error: " + first;
}

std::optional<int64_t> parse_integer_text(const std::string& text) {
  int64_t v = 0;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (!text.empty() && ec == std::errc() && ptr == end) return v;
  if (ec == std::errc::result_out_of_range) return std::nullopt;
  // 450e6: a whole number within 2^53, where every integer is exact in a double.
  const std::optional<double> d = parse_number_text(text);
  constexpr double kExact = 9007199254740992.0;  // 2^53
  if (d && std::floor(*d) == *d && std::fabs(*d) <= kExact) return static_cast<int64_t>(*d);
  return std::nullopt;
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

std::optional<size_t> word_index(const std::string& text, const std::vector<std::string>& words) {
  for (size_t i = 0; i < words.size(); ++i)
    if (words[i] == text) return i;
  return std::nullopt;
}

std::string word_list(const std::vector<std::string>& words) {
  std::string list;
  for (const std::string& w : words) list += (list.empty() ? "" : ", ") + w;
  return list;
}

bool OptionChoice::assign(const std::string& word) const {
  const std::optional<size_t> i = word_index(word, words);
  if (i) set(*i);
  return i.has_value();
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
    throw RunConfigError(
        "run config: " + table + "." + f.name + " = " + option_number_text(v) +
        (std::isfinite(v) ? " is outside " + f.range->text() : " is not a finite number; valid: " + f.range->text()) +
        (f.note[0] ? std::string(" (") + f.note + ")" : ""));
  }
}

}  // namespace joule
