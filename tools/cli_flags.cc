#include "tools/cli_flags.h"

#include <cmath>

namespace joule::tools {
namespace {

std::string range_words(const OptionRange& range, const char* note) {
  return range.text() + (note[0] ? std::string("; ") + note : "");
}

[[noreturn]] void refuse(const std::string& what, const std::string& text, const std::string& why,
                         const OptionRange& range, const char* note) {
  throw UsageError(what + " " + text + ": " + why + " (valid: " + range_words(range, note) + ")");
}

const std::string& text_of(const cxxopts::ParseResult& r, const NumberFlag& flag) {
  if (!r.count(flag.name) && !flag.default_text) throw InternalError(std::string("--") + flag.name + " has no value");
  return r[flag.name].as<std::string>();
}

}  // namespace

void add_number_flags(cxxopts::Options& options, const std::vector<NumberFlag>& flags) {
  for (const NumberFlag& f : flags) {
    const std::string help = std::string(f.help) + " " + range_words(f.range, f.note);
    if (f.default_text)
      options.add_options()(f.name, help, cxxopts::value<std::string>()->default_value(f.default_text));
    else
      options.add_options()(f.name, help, cxxopts::value<std::string>());
  }
}

int64_t checked_int(const std::string& text, const std::string& what, const OptionRange& range, const char* note) {
  const std::optional<int64_t> v = parse_integer_text(text);
  if (!v) {
    const bool digits = text.find_first_not_of("-0123456789") == std::string::npos &&
                        text.find_first_of("0123456789") != std::string::npos;
    const std::optional<double> d = parse_number_text(text);
    refuse(what, text,
           digits ? "outside the valid range"
           : d    ? "not a whole number (or beyond 2^53 in scientific notation)"
                  : "not an integer",
           range, note);
  }
  if (!range.contains(static_cast<double>(*v))) refuse(what, text, "outside the valid range", range, note);
  return *v;
}

double checked_number(const std::string& text, const std::string& what, const OptionRange& range, const char* note) {
  const std::optional<double> v = parse_number_text(text);
  if (!v) refuse(what, text, "not a number", range, note);
  if (!std::isfinite(*v)) refuse(what, text, "not a finite number", range, note);
  if (!range.contains(*v)) refuse(what, text, "outside the valid range", range, note);
  return *v;
}

int64_t int_flag(const cxxopts::ParseResult& r, const NumberFlag& flag) {
  return checked_int(text_of(r, flag), std::string("--") + flag.name, flag.range, flag.note);
}

double number_flag(const cxxopts::ParseResult& r, const NumberFlag& flag) {
  return checked_number(text_of(r, flag), std::string("--") + flag.name, flag.range, flag.note);
}

}  // namespace joule::tools
