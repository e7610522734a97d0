#include "tools/cli/flags.h"

#include <sys/stat.h>

#include <cctype>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>

#include "launch/cpu_isa.h"
#include "launch/util/file_io.h"

namespace joule::cli {
namespace fs = std::filesystem;
namespace {

// The number and path flags each Options declared, for parse() to check (one command runs per process; the tests
// that call handlers in one process parse each Options once).
struct Declared {
  std::vector<NumberFlag> numbers;
  std::vector<PathFlag> paths;
};
std::map<const cxxopts::Options*, Declared>& declared() {
  static std::map<const cxxopts::Options*, Declared> d;
  return d;
}

// PathKind's words for --describe-flags, in the enum's order.
const char* const kPathKindWords[] = {"input-file",  "input-dir",   "input-path",
                                      "input-model", "output-file", "output-dir"};
const char* kind_word(PathKind k) { return kPathKindWords[static_cast<size_t>(k)]; }

bool is_output(PathKind k) { return k == PathKind::output_file || k == PathKind::output_dir; }

// The path as the file system resolves it (symbolic links followed where they lead somewhere), for comparisons.
fs::path resolved(const std::string& path) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(fs::absolute(path, ec), ec);
  return ec ? fs::absolute(path).lexically_normal() : p;
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code ec;
  if (fs::exists(a, ec) && fs::exists(b, ec)) return fs::equivalent(a, b, ec);
  return resolved(a) == resolved(b);
}

// Whether `inner` lies inside the directory `outer` (not equal to it), where both lead.
bool lies_inside(const std::string& inner, const std::string& outer) {
  const std::string i = resolved(inner).string(), o = resolved(outer).string();
  return path_within(i, o) && !path_within(o, i);
}

// An input flag's value: a dangling link, a FIFO or a device is refused; a file where a directory belongs (or the
// other way round) too. Nothing there is the command's to say.
void check_input(const PathFlag& f, const std::string& value) {
  const std::string named = "--" + std::string(f.name) + " " + value;
  struct stat st {};
  if (::lstat(value.c_str(), &st) != 0) return;
  if (S_ISLNK(st.st_mode) && ::stat(value.c_str(), &st) != 0)
    throw IoError(named + ": a symbolic link to nothing (" + fs::read_symlink(value).string() + ")",
                  "give the file or directory itself, or mend the link");
  if (!S_ISREG(st.st_mode) && !S_ISDIR(st.st_mode))
    throw IoError(named + ": is " + file_kind_at(value) +
                      "; joule reads its inputs from regular files and directories (a pipe or a device could block "
                      "it for good)",
                  "give the path of a regular file or directory");
  if (f.kind == PathKind::input_file && S_ISDIR(st.st_mode))
    throw IoError(named + ": is a directory, not a file", "give the file itself");
  if (f.kind == PathKind::input_dir && !S_ISDIR(st.st_mode))
    throw IoError(named + ": not a directory (a regular file)",
                  "--" + std::string(f.name) + " takes a directory: give the directory itself");
}

struct NamedInput {
  std::string flag, path;
};

void check_output(const PathFlag& f, const std::string& value, const std::vector<NamedInput>& inputs) {
  const std::string named = "--" + std::string(f.name) + " " + value;
  std::string out = value;
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  const bool file = f.kind == PathKind::output_file;
  if (file) {
    check_replaceable(value);
  } else if (const std::string kind = file_kind_at(out); !kind.empty() && kind != "a directory") {
    const bool link = kind == "a symbolic link";
    throw IoError("--" + std::string(f.name) + " " + value + " is " + kind +
                      (link ? " (to " + fs::read_symlink(out).string() + ")" : "") +
                      ", not a directory: joule makes its output directories itself (and would replace what is there)",
                  link ? "give the directory it points to" : "give a new or existing directory");
  }
  for (const NamedInput& in : inputs) {
    if (same_file(out, in.path))
      throw UsageError(named + ": is also the command's input " + in.flag + " " + in.path +
                           ": writing it would destroy what the command reads",
                       "name another output");
    std::error_code ec;
    const bool own_file =
        file && fs::path(out).filename() == f.writes_in &&
        same_file(fs::path(out).parent_path().empty() ? "." : fs::path(out).parent_path().string(), in.path);
    if (!own_file && fs::is_directory(in.path, ec) && lies_inside(out, in.path))
      throw UsageError(named + ": lies inside " + in.flag + " " + in.path +
                           ", which the command reads: writing there would change its input",
                       "write it outside " + in.path);
  }
  if (!file) return;
  const fs::path parent = fs::path(out).parent_path().empty() ? fs::path(".") : fs::path(out).parent_path();
  const std::string owner = owned_directory(parent.string());
  if (!owner.empty() && fs::path(out).filename() != f.writes_in)
    throw UsageError(named + ": lies in " + parent.string() + ", " + owner +
                         ": its files belong to what made it, and writing one there would break it",
                     "write it outside " + parent.string());
}

std::string describe(const Declared& d) {
  std::string text;
  for (const NumberFlag& n : d.numbers) text += "number " + std::string(n.name) + " " + n.range.text() + "\n";
  for (const PathFlag& p : d.paths)
    text += "path " + std::string(p.name) + " " + kind_word(p.kind) + " " + (p.holds[0] ? p.holds : "-") + "\n";
  return text;
}

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
  auto& d = declared()[&options];
  d.numbers.insert(d.numbers.end(), flags.begin(), flags.end());
  for (const NumberFlag& f : flags) {
    const std::string help = std::string(f.help) + " " + range_words(f.range, f.note);
    if (f.default_text)
      options.add_options()(f.name, help, cxxopts::value<std::string>()->default_value(f.default_text));
    else
      options.add_options()(f.name, help, cxxopts::value<std::string>());
  }
}

void declare_number_flags(cxxopts::Options& options, const std::vector<NumberFlag>& flags) {
  auto& d = declared()[&options];
  d.numbers.insert(d.numbers.end(), flags.begin(), flags.end());
}

void add_path_flags(cxxopts::Options& options, const std::vector<PathFlag>& flags) {
  auto& d = declared()[&options];
  d.paths.insert(d.paths.end(), flags.begin(), flags.end());
  for (const PathFlag& f : flags) {
    if (f.default_text)
      options.add_options()(f.name, f.help, cxxopts::value<std::string>()->default_value(f.default_text));
    else
      options.add_options()(f.name, f.help, cxxopts::value<std::string>());
  }
}

void check_replacing(const cxxopts::ParseResult& r, const std::string& flag, const std::string& makes) {
  if (!r.count(flag)) return;
  const std::string out = r[flag].as<std::string>();
  std::error_code ec;
  if (!fs::is_directory(out, ec) || fs::is_empty(out, ec)) return;
  const std::string holds = owned_directory(out);
  const std::string named = "--" + flag + " " + out;
  if (holds == makes) {
    if (r.count("replace")) return;
    throw UsageError(named + " already holds " + makes + ": not replaced",
                     "give a new --" + flag + " directory, or pass --replace to replace it");
  }
  std::string entries;
  int count = 0;
  for (const auto& e : fs::directory_iterator(out, ec))
    if (count++ < 4) entries += (entries.empty() ? "" : ", ") + e.path().filename().string();
  throw UsageError(named +
                       (holds.empty() ? " is not empty (" + std::to_string(count) + " entries: " + entries +
                                            (count > 4 ? ", ..." : "") + ")"
                                      : " is " + holds) +
                       ": writing " + makes + " there would mix the two (--replace replaces only " + makes + ")",
                   "give a new or empty directory");
}

void add_quiet_flag(cxxopts::Options& options) {
  options.add_options()("quiet",
                        "no progress line on stderr (by default one that updates on a terminal, else a line "
                        "at each tenth of the work)");
}

namespace {
bool saying_notes = true;
}  // namespace

void say_notes(bool on) { saying_notes = on; }

int thread_flag(const cxxopts::ParseResult& r, const NumberFlag& flag) {
  const int64_t asked = int_flag(r, flag);
  const int64_t cores = std::max<int64_t>(1, static_cast<int64_t>(launch::affinity_cpus().size()));
  if (asked <= cores) return static_cast<int>(asked);
  if (saying_notes)
    std::cerr << "note: --" << flag.name << " " << asked << " is more than the " << cores
              << " core(s) this process may run on: using " << cores << " (more threads only share the same cores)\n";
  return static_cast<int>(cores);
}

std::string owned_directory(const std::string& dir) {
  std::error_code ec;
  const auto has = [&](const char* name) { return fs::exists(fs::path(dir) / name, ec); };
  if (has("summary.json") || has("metrics.jsonl") || has(".joule.lock")) return "a run directory";
  if (has("manifest.json")) return "a checkpoint (manifest.json)";
  if (has("metadata.json")) return "a data set (metadata.json)";
  if (has("inference.json")) return "an inference run (inference.json)";
  if (has("config.json") && (has("model.safetensors") || has("vocab.txt"))) return "a model directory (config.json)";
  return "";
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

cxxopts::ParseResult parse(cxxopts::Options& options, int argc, char** argv,
                           const std::vector<std::string>& taken_inputs) {
  const Declared d = declared()[&options];
  declared().erase(&options);
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--describe-flags") throw HelpRequested{describe(d)};
  options.add_options()("h,help", "show this help");
  cxxopts::ParseResult result = options.parse(argc, argv);
  if (result.count("help")) throw HelpRequested{options.help()};
  if (!result.unmatched().empty()) throw UsageError("unexpected argument '" + result.unmatched().front() + "'");
  for (const NumberFlag& n : d.numbers)
    if (result.count(n.name) || n.default_text)
      checked_number(result[n.name].as<std::string>(), std::string("--") + n.name, n.range, n.note);
  std::vector<NamedInput> inputs;
  for (const std::string& t : taken_inputs) inputs.push_back({"--input", t});
  for (const PathFlag& p : d.paths) {
    if (is_output(p.kind) || !result.count(p.name)) continue;
    const std::string value = result[p.name].as<std::string>();
    if (value.empty()) continue;
    check_input(p, value);
    inputs.push_back({"--" + std::string(p.name), value});
  }
  for (const PathFlag& p : d.paths)
    if (is_output(p.kind) && result.count(p.name) && !result[p.name].as<std::string>().empty())
      check_output(p, result[p.name].as<std::string>(), inputs);
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
