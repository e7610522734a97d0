#include "trainer/run_config.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <sstream>
#include <variant>

#include <toml.hpp>

#include "models/precision.h"

namespace joule::trainer {
namespace {

using Target = std::variant<int64_t*, double*, std::string*>;
struct Field {
  const char* key;  // "table.key"
  Target target;
};

std::vector<Field> fields(RunConfig& c) {
  return {{"train.steps", &c.steps},
          {"train.target_sequences", &c.target_sequences},
          {"train.micro_batch", &c.micro_batch},
          {"train.accumulation", &c.accumulation},
          {"train.global_batch", &c.global_batch},
          {"train.seq_len", &c.seq_len},
          {"train.threads", &c.threads},
          {"train.seed", &c.seed},
          {"train.log_every_steps", &c.log_every_steps},
          {"train.throughput_warmup_steps", &c.throughput_warmup_steps},
          {"train.max_nonfinite_steps", &c.max_nonfinite_steps},
          {"train.collective_timeout_seconds", &c.collective_timeout_seconds},
          {"train.precision", &c.precision},
          {"train.device", &c.device},
          {"train.progress", &c.progress},
          {"optimizer.name", &c.optimizer},
          {"optimizer.lr", &c.lr},
          {"optimizer.warmup_fraction", &c.warmup_fraction},
          {"optimizer.beta1", &c.beta1},
          {"optimizer.beta2", &c.beta2},
          {"optimizer.eps", &c.eps},
          {"optimizer.weight_decay", &c.weight_decay},
          {"optimizer.max_grad_norm", &c.max_grad_norm},
          {"checkpoint.every_steps", &c.checkpoint_every_steps},
          {"checkpoint.every_minutes", &c.checkpoint_every_minutes},
          {"checkpoint.keep", &c.checkpoint_keep},
          {"eval.every_steps", &c.eval_every_steps},
          {"eval.target_mlm_accuracy", &c.eval_target_mlm_accuracy},
          {"eval.batch", &c.eval_batch},
          {"eval.max_batches", &c.eval_max_batches},
          {"data.train", &c.train_data},
          {"data.eval", &c.eval_data},
          {"data.vocab", &c.vocab},
          {"model.config", &c.model},
          {"run.dir", &c.run_dir},
          {"sim.instance", &c.sim_instance},
          {"sim.nodes", &c.sim_nodes},
          {"accounting.instance", &c.instance},
          {"accounting.price_per_hour", &c.price_per_hour},
          {"accounting.pue", &c.pue},
          {"accounting.region", &c.region},
          {"accounting.grid_intensity", &c.grid_intensity},
          {"accounting.meters", &c.meters},
          {"accounting.meter_sample_seconds", &c.meter_sample_seconds},
          {"accounting.project_sequences", &c.project_sequences},
          {"accounting.project_after_fraction", &c.project_after_fraction},
          {"accounting.project_name", &c.project_name},
          {"accounting.prometheus_file", &c.prometheus_file}};
}

std::string key_list() {
  RunConfig c;
  std::string s;
  for (const Field& f : fields(c)) s += (s.empty() ? "" : ", ") + std::string(f.key);
  return s;
}

Field* find(std::vector<Field>& all, const std::string& key) {
  for (Field& f : all)
    if (key == f.key) return &f;
  return nullptr;
}

const char* type_name(const Target& t) {
  return std::holds_alternative<int64_t*>(t) ? "an integer" : std::holds_alternative<double*>(t) ? "a number" : "a string";
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
    if (c == '"' || c == '\\') out += '\\', out += ch;
    else if (c == '\n') out += "\\n";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else out += ch;
  }
  return out + "\"";
}

[[noreturn]] void unknown(const std::string& where, const std::string& key) {
  throw RunConfigError(where + ": unknown key '" + key + "'; valid keys: " + key_list());
}

}  // namespace

std::string utf8_problem(const std::string& text) {
  size_t line = 1;
  for (size_t i = 0; i < text.size();) {
    const auto c = static_cast<unsigned char>(text[i]);
    size_t n = 4;  // continuation bytes; 4: not a lead byte
    uint32_t cp = 0;
    if (c < 0x80) n = 0, cp = c;
    else if ((c >> 5) == 0x6) n = 1, cp = c & 0x1Fu;
    else if ((c >> 4) == 0xE) n = 2, cp = c & 0x0Fu;
    else if ((c >> 3) == 0x1E) n = 3, cp = c & 0x07u;
    bool ok = n < 4 && i + n < text.size();
    for (size_t k = 1; ok && k <= n; ++k) {
      const auto cc = static_cast<unsigned char>(text[i + k]);
      ok = (cc & 0xC0) == 0x80;
      cp = (cp << 6) | (cc & 0x3Fu);
    }
    // No overlong forms, no surrogates, nothing above U+10FFFF.
    if (ok && n > 0) ok = cp >= (n == 1 ? 0x80u : n == 2 ? 0x800u : 0x10000u) && !(cp >= 0xD800 && cp <= 0xDFFF) && cp <= 0x10FFFF;
    if (!ok) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "line %zu, byte %zu (0x%02x): not valid UTF-8", line, i + 1, c);
      return buf;
    }
    if (c == '\n') ++line;
    i += n + 1;
  }
  return "";
}

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
    throw RunConfigError(std::string(e.what()));
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
        throw RunConfigError(where + ": key '" + key + "' must be " + type_name(f->target) + ", found " + toml::format(value));
      };
      if (auto* i = std::get_if<int64_t*>(&f->target)) {
        if (value.is_integer()) **i = value.as_integer();
        else if (value.is_floating() && whole_int64(value.as_floating())) **i = static_cast<int64_t>(value.as_floating());
        else bad_type();
      } else if (auto* d = std::get_if<double*>(&f->target)) {
        if (value.is_floating()) **d = value.as_floating();
        else if (value.is_integer()) **d = static_cast<double>(value.as_integer());
        else bad_type();
      } else if (auto* s = std::get_if<std::string*>(&f->target)) {
        if (!value.is_string()) bad_type();
        **s = value.as_string().str;
      }
    }
  }
  c.validate();
  return c;
}

RunConfig RunConfig::from_toml_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) throw RunConfigError(path + ": a directory, not a run config (TOML) file");
  std::ifstream in(path);
  if (!in) throw RunConfigError(path + ": cannot open run config");
  std::stringstream ss;
  ss << in.rdbuf();
  return from_toml_text(ss.str(), path);
}

void RunConfig::set(const std::string& assignment) {
  const size_t eq = assignment.find('=');
  if (eq == std::string::npos) throw RunConfigError("--set " + assignment + ": expected table.key=value");
  const std::string key = assignment.substr(0, eq), text = assignment.substr(eq + 1);
  auto all = fields(*this);
  Field* f = find(all, key);
  if (!f) unknown("--set", key);
  if (const std::string bad = utf8_problem(text); !bad.empty()) throw RunConfigError("--set " + key + ": " + bad);
  try {
    size_t used = 0;
    if (auto* i = std::get_if<int64_t*>(&f->target)) {
      const double v = std::stod(text, &used);  // accepts 450e6
      if (used != text.size() || !whole_int64(v)) throw RunConfigError(text);
      **i = static_cast<int64_t>(v);
    } else if (auto* d = std::get_if<double*>(&f->target)) {
      **d = std::stod(text, &used);
      if (used != text.size()) throw RunConfigError(text);
    } else if (text.size() >= 2 && (text.front() == '"' || text.front() == '\'') && text.back() == text.front()) {
      // Written as in the TOML file (--set run.dir="/scratch/x"): the string inside the quotes, escapes read as TOML.
      std::istringstream in("value = " + text);
      const toml::value root = toml::parse(in, "--set " + key);
      *std::get<std::string*>(f->target) = toml::find<std::string>(root, "value");
    } else {
      *std::get<std::string*>(f->target) = text;
    }
  } catch (const std::exception&) {
    throw RunConfigError("--set " + key + ": '" + text + "' is not " + type_name(f->target));
  }
}

namespace {

std::string number_text(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// A key's range: [lo, hi] with open ends where said; `note` says what a special value means.
struct Range {
  const char* key;
  double lo, hi;
  bool lo_open, hi_open;
  const char* note;
};

// Every numeric key and its valid range (the door every value passes, from TOML and --set alike).
constexpr double kInf = std::numeric_limits<double>::infinity();
const Range kRanges[] = {
    {"train.steps", 0, kInf, false, false, "0: from train.target_sequences"},
    {"train.target_sequences", 0, kInf, false, false, "0: train.steps x the global batch"},
    {"train.micro_batch", 1, kInf, false, false, ""},
    {"train.accumulation", 1, kInf, false, false, ""},
    {"train.global_batch", 0, kInf, false, false, "0: micro_batch x accumulation x ranks"},
    {"train.seq_len", 0, kInf, false, false, "0: the shards'"},
    {"train.threads", 0, kInf, false, false, "0: the node's cores / local ranks"},
    {"train.seed", 0, kInf, false, false, ""},
    {"train.log_every_steps", 1, kInf, false, false, ""},
    {"train.throughput_warmup_steps", 0, kInf, false, false, ""},
    {"train.max_nonfinite_steps", 1, kInf, false, false, ""},
    {"train.collective_timeout_seconds", 0, kInf, true, false, ""},
    {"optimizer.lr", 0, kInf, true, false, ""},
    {"optimizer.warmup_fraction", 0, 1, false, true, ""},
    {"optimizer.beta1", 0, 1, false, true, ""},
    {"optimizer.beta2", 0, 1, false, true, ""},
    {"optimizer.eps", 0, kInf, true, false, ""},
    {"optimizer.weight_decay", 0, kInf, false, false, ""},
    {"optimizer.max_grad_norm", 0, kInf, false, false, "0: no clipping"},
    {"checkpoint.every_steps", 0, kInf, false, false, "0: off"},
    {"checkpoint.every_minutes", 0, kInf, false, false, "0: off"},
    {"checkpoint.keep", 1, kInf, false, false, ""},
    {"eval.every_steps", 0, kInf, false, false, "0: at the end only"},
    {"eval.target_mlm_accuracy", 0, 1, false, false, "0: none"},
    {"eval.batch", 1, kInf, false, false, ""},
    {"eval.max_batches", 1, kInf, false, false, ""},
    {"sim.nodes", 1, kInf, false, false, ""},
    {"accounting.price_per_hour", -kInf, kInf, false, false, "negative: the instance profile's"},
    {"accounting.grid_intensity", 0, kInf, false, false, "0: the region's"},
    {"accounting.meter_sample_seconds", 0, 60, true, false, ""},
    {"accounting.project_sequences", 1, kInf, false, false, ""},
    {"accounting.project_after_fraction", 0, 1, false, true, ""},
};

std::string range_text(const Range& r) {
  auto end = [](double v) { return std::isinf(v) ? std::string(v < 0 ? "-inf" : "inf") : number_text(v); };
  return std::string(r.lo_open ? "(" : "[") + end(r.lo) + ", " + end(r.hi) + (r.hi_open || std::isinf(r.hi) ? ")" : "]");
}

}  // namespace

void RunConfig::validate() const {
  auto fail = [](const std::string& m) { throw RunConfigError("run config: " + m); };
  RunConfig copy = *this;
  std::vector<Field> all = fields(copy);
  for (const Range& r : kRanges) {
    const Field* f = find(all, r.key);
    if (!f) throw joule::InternalError(std::string("run config: no key ") + r.key + " for its range");
    const double v = std::holds_alternative<int64_t*>(f->target) ? static_cast<double>(*std::get<int64_t*>(f->target))
                                                                   : *std::get<double*>(f->target);
    const bool ok = std::isfinite(v) && (r.lo_open ? v > r.lo : v >= r.lo) && (r.hi_open ? v < r.hi : v <= r.hi);
    if (!ok)
      fail(std::string(r.key) + " = " + number_text(v) + (std::isfinite(v) ? " is outside " + range_text(r) : " is not a finite number; valid: " + range_text(r)) +
           (r.note[0] ? std::string(" (") + r.note + ")" : ""));
  }
  if (global_batch > 0 && global_batch % micro_batch != 0)
    fail("train.global_batch " + std::to_string(global_batch) + " is not divisible by train.micro_batch " + std::to_string(micro_batch));
  if (optimizer != "lamb" && optimizer != "adamw") fail("optimizer.name is \"" + optimizer + "\"; valid values: lamb, adamw");
  if (progress != "auto" && progress != "bar" && progress != "lines")
    fail("train.progress is \"" + progress + "\"; valid values: auto, bar, lines");
  if (!models::is_precision_setting(precision))
    fail("train.precision is \"" + precision + "\"; valid values: " + models::precision_settings());
  if (device != "cpu" && device != "cuda" && device != "trainium-sim")
    fail("train.device is \"" + device + "\"; valid values: cpu, cuda, trainium-sim");
  if (!std::isfinite(pue) || (pue != 0 && pue < 1)) fail("accounting.pue must be >= 1 (or 0: the instance profile's)");
}

std::string RunConfig::to_toml() const {
  RunConfig copy = *this;
  std::ostringstream out;
  std::string table;
  for (const Field& f : fields(copy)) {
    const std::string key = f.key;
    const std::string t = key.substr(0, key.find('.')), name = key.substr(key.find('.') + 1);
    if (t != table) out << (table.empty() ? "" : "\n") << "[" << (table = t) << "]\n";
    out << name << " = ";
    if (auto* i = std::get_if<int64_t*>(&f.target)) out << **i;
    else if (auto* d = std::get_if<double*>(&f.target)) {
      char buf[64];  // shortest text that reads back to the same double
      const auto res = std::to_chars(buf, buf + sizeof buf, **d);
      std::string text(buf, res.ptr);
      if (text.find_first_of(".eEn") == std::string::npos) text += ".0";  // keep it a TOML float
      out << text;
    }
    else out << toml_string(*std::get<std::string*>(f.target));
    out << "\n";
  }
  return out.str();
}

}  // namespace joule::trainer
