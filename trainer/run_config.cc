#include "trainer/run_config.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <set>
#include <sstream>
#include <variant>

#include <toml.hpp>

namespace joule::trainer {
namespace {

// One key of the run config: its section's table and the section's field.
struct Field {
  std::string key;  // "table.key"
  OptionTarget target;
};

// Calls fn(section) for every section, in the order of the resolved config.
template <typename Config, typename Fn>
void for_each_section(Config& c, Fn fn) {
  fn(c.train);
  fn(c.optimizer);
  fn(c.checkpoint);
  fn(c.eval);
  fn(c.data);
  fn(c.model);
  fn(c.run);
  fn(c.sim);
  fn(c.accounting);
}

std::vector<Field> fields(RunConfig& c) {
  std::vector<Field> all;
  for_each_section(c, [&](auto& section) {
    for (const OptionField& f : section.fields()) all.push_back({std::string(section.kTable) + "." + f.name, f.target});
  });
  return all;
}

}  // namespace

std::optional<std::pair<OptionRange, const char*>> RunConfig::key_range(const std::string& key) {
  RunConfig c;
  std::optional<std::pair<OptionRange, const char*>> found;
  for_each_section(c, [&](auto& section) {
    for (const OptionField& f : section.fields())
      if (std::string(section.kTable) + "." + f.name == key && f.range) found = std::make_pair(*f.range, f.note);
  });
  return found;
}

namespace {

std::string key_list() {
  RunConfig c;
  std::string s;
  for (const Field& f : fields(c)) s += (s.empty() ? "" : ", ") + f.key;
  return s;
}

Field* find(std::vector<Field>& all, const std::string& key) {
  for (Field& f : all)
    if (key == f.key) return &f;
  return nullptr;
}

// A whole number that fits int64_t (casting a larger double is undefined behaviour: fuzz_run_config found
// `--set train.steps=2e72`).
bool whole_int64(double v) { return std::floor(v) == v && v >= -9.2e18 && v <= 9.2e18; }

// A TOML basic string on one line, whatever its length: toml::format wraps strings longer than 80 columns
// with line-ending backslashes, which drop the next line's leading spaces when read back (fuzz_run_config
// found a path whose resolved config.toml did not read back the same).
std::string toml_string(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\')
      out += '\\', out += ch;
    else if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else
      out += ch;
  }
  return out + "\"";
}

// A key's value as the resolved config.toml writes it.
std::string value_text(const Field& f) {
  if (auto* i = std::get_if<int64_t*>(&f.target)) return std::to_string(**i);
  if (auto* d = std::get_if<double*>(&f.target)) {
    char buf[64];  // shortest text that reads back to the same double
    const auto res = std::to_chars(buf, buf + sizeof buf, **d);
    std::string text(buf, res.ptr);
    if (text.find_first_of(".eEn") == std::string::npos) text += ".0";  // keep it a TOML float
    return text;
  }
  if (auto* c = std::get_if<OptionChoice>(&f.target)) return toml_string(c->word());
  return toml_string(*std::get<std::string*>(f.target));
}

// Sets a choice key to `word`, or says which words it takes.
void choose(const OptionChoice& choice, const std::string& key, const std::string& word) {
  if (!choice.assign(word))
    throw RunConfigError("run config: " + key + " is \"" + word + "\"; valid values: " + word_list(choice.words));
}

// A --set value as the string it stands for: written as in the TOML file (--set run.dir="/scratch/x"), the string
// inside the quotes with escapes read as TOML; else the text itself.
std::string set_string(const std::string& text, const std::string& who) {
  if (text.size() >= 2 && (text.front() == '"' || text.front() == '\'') && text.back() == text.front()) {
    std::istringstream in("value = " + text);
    const toml::value root = toml::parse(in, who);
    return toml::find<std::string>(root, "value");
  }
  return text;
}

[[noreturn]] void unknown(const std::string& where, const std::string& key) {
  throw RunConfigError(where + ": unknown key '" + key + "'; valid keys: " + key_list());
}

}  // namespace

std::vector<std::string> RunConfig::keys() {
  RunConfig c;
  std::vector<std::string> out;
  for (const Field& f : fields(c)) out.push_back(f.key);
  return out;
}

RunConfig RunConfig::from_toml_text(const std::string& text, const std::string& where) {
  if (const std::string bad = utf8_problem(text); !bad.empty())
    throw RunConfigError(where + ": " + bad + " (TOML files must be UTF-8)");
  toml::value root;
  try {
    std::istringstream in(text);
    root = toml::parse(in, where);
  } catch (const std::exception& e) {
    throw RunConfigError(toml_syntax_problem(e.what(), where));
  }
  RunConfig c;
  auto all = fields(c);
  if (!root.is_table()) throw RunConfigError(where + ": expected TOML tables");
  for (const auto& [table, body] : root.as_table()) {
    if (!body.is_table()) unknown(where, table);
    for (const auto& entry : body.as_table()) {
      const toml::value& value = entry.second;  // a plain reference: lambdas cannot capture bindings in C++17
      const std::string key = table + "." + entry.first;
      Field* f = find(all, key);
      if (!f) unknown(where, key);
      auto bad_type = [&] {
        throw RunConfigError(where + ": key '" + key + "' must be " + option_type_name(f->target) + ", found " +
                             toml::format(value));
      };
      if (auto* i = std::get_if<int64_t*>(&f->target)) {
        if (value.is_integer())
          **i = value.as_integer();
        else if (value.is_floating() && whole_int64(value.as_floating()))
          **i = static_cast<int64_t>(value.as_floating());
        else
          bad_type();
      } else if (auto* d = std::get_if<double*>(&f->target)) {
        if (value.is_floating())
          **d = value.as_floating();
        else if (value.is_integer())
          **d = static_cast<double>(value.as_integer());
        else
          bad_type();
      } else if (auto* s = std::get_if<std::string*>(&f->target)) {
        if (!value.is_string()) bad_type();
        **s = value.as_string().str;
      } else if (auto* c = std::get_if<OptionChoice>(&f->target)) {
        if (!value.is_string()) bad_type();
        choose(*c, key, value.as_string().str);
      }
    }
  }
  c.validate();
  return c;
}

RunConfig RunConfig::from_toml_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    throw RunConfigError(path + ": a directory, not a run config (TOML) file");
  std::ifstream in(path);
  if (!in) throw RunConfigError(path + ": cannot open run config");
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().find_first_not_of(" \t\r\n") == std::string::npos)
    throw RunConfigError(path + ": an empty run config (no keys)",
                         "a run config names at least the data: [data] train = \"SHARDS\" (configs/ has examples)");
  return from_toml_text(ss.str(), path);
}

void RunConfig::set(const std::string& assignment, const std::string& flag) {
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos) throw RunConfigError("--set " + assignment + ": expected table.key=value");
  const std::string key = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  const std::string who = flag.empty() ? "--set " + key : flag + " (" + key + ")";  // as the user typed it
  auto all = fields(*this);
  Field* f = find(all, key);
  if (!f) unknown("--set", key);
  if (const std::string bad = utf8_problem(text); !bad.empty()) throw RunConfigError(who + ": " + bad);
  if (auto* c = std::get_if<OptionChoice>(&f->target)) {
    std::string word;
    try {
      word = set_string(text, who);
    } catch (const std::exception&) {
      throw RunConfigError(who + ": '" + text + "' is not " + option_type_name(f->target));
    }
    choose(*c, key, word);
    return;
  }
  try {
    if (auto* i = std::get_if<int64_t*>(&f->target)) {
      const std::optional<int64_t> v = parse_integer_text(text);  // 450e6 too; never wraps
      if (!v) throw RunConfigError(text);
      **i = *v;
    } else if (auto* d = std::get_if<double*>(&f->target)) {
      const std::optional<double> v = parse_number_text(text);
      if (!v) throw RunConfigError(text);
      **d = *v;
    } else {
      *std::get<std::string*>(f->target) = set_string(text, who);
    }
  } catch (const std::exception&) {
    throw RunConfigError(who + ": '" + text + "' is not " + option_type_name(f->target));
  }
}

void RunConfig::validate() const {
  for_each_section(*this, [](const auto& section) { section.validate(); });
}

std::string RunConfig::to_toml() const { return to_toml({}); }

std::string RunConfig::to_toml(const std::vector<std::pair<std::string, std::string>>& comments) const {
  RunConfig copy = *this;
  std::ostringstream out;
  std::string table;
  for (const Field& f : fields(copy)) {
    const std::string key = f.key;
    const std::string t = key.substr(0, key.find('.')), name = key.substr(key.find('.') + 1);
    if (t != table) out << (table.empty() ? "" : "\n") << "[" << (table = t) << "]\n";
    out << name << " = " << value_text(f);
    for (const auto& [k, text] : comments)
      if (k == key) {
        std::string one_line = text;  // a comment ends at the line's end
        for (char& c : one_line)
          if (c == '\n' || c == '\r') c = ' ';
        out << "  # " << one_line;
      }
    out << "\n";
  }
  return out.str();
}

namespace {

// Whether `key` holds its automatic default in `c` (the value a default-constructed config has: 0, -1, "auto", "").
bool holds_default(RunConfig& c, const std::string& key) {
  RunConfig d;
  auto all = fields(c), defaults = fields(d);
  const Field* f = find(all, key);
  if (!f) throw std::logic_error("used value for an unknown key " + key);
  return value_text(*f) == value_text(*find(defaults, key));
}

}  // namespace

RunConfig with_automatic_values(RunConfig cfg, const std::vector<AutomaticValue>& used) {
  for (const AutomaticValue& u : used)
    if (!u.value.empty() && holds_default(cfg, u.key)) cfg.set(u.key + "=" + u.value);
  return cfg;
}

std::string used_config_toml(const RunConfig& cfg, const std::vector<AutomaticValue>& used) {
  RunConfig given = cfg;
  std::vector<std::pair<std::string, std::string>> comments;
  for (const AutomaticValue& u : used)
    if (holds_default(given, u.key)) comments.emplace_back(u.key, "auto: " + u.source);
  return "# The config this run used, every key. Keys marked \"# auto\" were left automatic: each holds the value the\n"
         "# run worked out, and where it came from. `joule train --config` with this file repeats the run.\n\n" +
         with_automatic_values(cfg, used).to_toml(comments);
}

std::vector<ConfigChange> config_changes(const RunConfig& before, const RunConfig& after) {
  // Keys that name a file or directory: the same path spelled otherwise ("shards/train/", "./shards/train", an
  // absolute path) is not a change.
  static const std::set<std::string> kPaths = {"data.train",   "data.eval", "data.vocab",
                                               "model.config", "run.dir",   "accounting.prometheus_file"};
  // Keys that do not change what the remaining steps compute (how long, how often to log, save and evaluate, how
  // it is billed), and the two that change the schedule's length.
  static const std::set<std::string> kSafeTables = {"checkpoint", "eval", "run", "sim", "accounting"};
  static const std::set<std::string> kSafeKeys = {"train.log_every_steps",
                                                  "train.throughput_warmup_steps",
                                                  "train.threads",
                                                  "train.progress",
                                                  "train.collective_timeout_seconds",
                                                  "train.max_nonfinite_steps",
                                                  "data.eval"};
  static const std::set<std::string> kSchedule = {"train.steps", "train.target_sequences"};
  RunConfig a = before, b = after;
  const std::vector<Field> fa = fields(a), fb = fields(b);
  std::vector<ConfigChange> out;
  for (size_t i = 0; i < fa.size(); ++i) {
    const std::string was = value_text(fa[i]), now = value_text(fb[i]);
    if (was == now) continue;
    const std::string& key = fa[i].key;
    // The fp32 GEMM library: a resume's own warning names it where it matters (fp32 runs: trainer/run_setup.cc).
    if (key == "train.fp32_gemm") continue;
    if (kPaths.count(key)) {
      std::error_code e1, e2;
      const std::string& p = *std::get<std::string*>(fa[i].target);
      const std::string& q = *std::get<std::string*>(fb[i].target);
      if (!p.empty() && !q.empty() &&
          std::filesystem::weakly_canonical(p, e1) == std::filesystem::weakly_canonical(q, e2) && !e1 && !e2)
        continue;
    }
    ConfigChange c{key, was, now, true, "does not change what the steps compute"};
    if (key == "train.accumulation" && a.train.global_batch > 0 && a.train.global_batch == b.train.global_batch) {
      c.note = "follows train.global_batch = " + std::to_string(b.train.global_batch) +
               " on another number of ranks: the same global batch";
    } else if (key == "optimizer.shard") {
      c.note = "the same update, its optimizer state sharded over the ranks or not (weights equal to fp32 rounding)";
    } else if (kSchedule.count(key)) {
      c.note = "the run's length: the learning-rate schedule's warm-up and decay stretch to it from here on";
    } else if (!kSafeKeys.count(key) && !kSafeTables.count(key.substr(0, key.find('.')))) {
      c.safe = false;
      c.note = "changes the training from here on: the run is no longer the one its earlier steps belong to";
    }
    out.push_back(std::move(c));
  }
  return out;
}

}  // namespace joule::trainer
