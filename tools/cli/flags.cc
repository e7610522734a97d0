#include "tools/cli/flags.h"

#include <cctype>
#include <cmath>
#include <filesystem>
#include <sstream>

namespace joule::cli {
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

cxxopts::ParseResult parse(cxxopts::Options& options, int argc, char** argv) {
  options.add_options()("h,help", "show this help");
  cxxopts::ParseResult result = options.parse(argc, argv);
  if (result.count("help")) throw HelpRequested{options.help()};
  if (!result.unmatched().empty()) throw UsageError("unexpected argument '" + result.unmatched().front() + "'");
  return result;
}

std::string required(const cxxopts::ParseResult& r, const std::string& key) {
  if (!r.count(key)) throw UsageError("missing required option --" + key);
  const std::string value = r[key].as<std::string>();
  if (value.empty()) throw UsageError("--" + key + " is empty: it names a file or directory");
  return value;
}

std::vector<std::string> take_flag_values(int& argc, char** argv, const std::string& name) {
  const std::string flag = "--" + name;
  std::vector<std::string> values;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == flag) {
      if (i + 1 >= argc) throw UsageError(flag + " needs a value");
      values.emplace_back(argv[++i]);
    } else if (a.rfind(flag + "=", 0) == 0) {
      values.push_back(a.substr(flag.size() + 1));
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  return values;
}

bool has_flag(int argc, char** argv, const std::string& name) {
  const std::string flag = "--" + name;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == flag || a.rfind(flag + "=", 0) == 0) return true;
  }
  return false;
}

void refuse_flags(int argc, char** argv, std::initializer_list<const char*> flags, const std::string& why) {
  for (const char* f : flags)
    if (has_flag(argc, argv, f)) throw UsageError("--" + std::string(f) + " " + why);
}

std::vector<std::string> split_commas(const std::string& text) {
  std::vector<std::string> items;
  std::stringstream list(text);
  for (std::string item; std::getline(list, item, ',');) items.push_back(item);
  return items;
}

std::string output_directory(std::string out) {
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  const std::string last = std::filesystem::path(out).filename().string();
  if (last == "." || last == "..") out = std::filesystem::absolute(out).lexically_normal().string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

int64_t parse_size(const std::string& flag, const std::string& text) {
  size_t used = 0;
  while (used < text.size() && (std::isdigit(static_cast<unsigned char>(text[used])) || text[used] == '.')) ++used;
  const double value = parse_number_text(text.substr(0, used)).value_or(-1);
  std::string unit = text.substr(used);
  for (char& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (unit.size() > 1 && unit.back() == 'B') unit.pop_back();
  if (unit.size() > 1 && unit.back() == 'I') unit.pop_back();  // GiB, MiB
  const double scale = unit.empty() || unit == "B" ? 1
                       : unit == "K"               ? 1024.0
                       : unit == "M"               ? 1048576.0
                       : unit == "G"               ? 1073741824.0
                       : unit == "T"               ? 1099511627776.0
                                                   : -1;
  if (value <= 0 || scale < 0)
    throw UsageError("--" + flag + " \"" + text + "\": expected a size such as 512MB or 2GB");
  constexpr double kMost = 1125899906842624.0;  // 1 PiB: no machine's memory yet, and far from int64's end
  if (value * scale > kMost) throw UsageError("--" + flag + " \"" + text + "\": more than 1 PiB");
  return static_cast<int64_t>(value * scale);
}

}  // namespace joule::cli
