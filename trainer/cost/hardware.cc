#include "trainer/cost/hardware.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <toml.hpp>

#include "launch/util/format.h"
#include "launch/util/options.h"
#include "launch/util/utf8.h"

namespace joule::cost {
namespace fs = std::filesystem;
namespace {

toml::value parse_file(const std::string& path, const char* what) {
  if (!fs::is_regular_file(path)) throw ProfileError(path + ": no such " + what + " file");
  std::ifstream in(path, std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (const std::string bad = utf8_problem(text); !bad.empty())
    throw ProfileError(path + ": " + bad + " (TOML files must be UTF-8)");
  try {
    std::istringstream stream(text);
    return toml::parse(stream, path);
  } catch (const std::exception& e) {
    throw ProfileError(toml_syntax_problem(e.what(), path));
  }
}

// Reads one table's keys, refusing unknown ones; numbers accept integers.
class Table {
 public:
  Table(const toml::value& root, const std::string& name, const std::string& file, std::set<std::string> allowed)
      : name_(name), file_(file) {
    if (!root.contains(name)) return;
    check(root.at(name), allowed);
  }
  // One element of an array of tables ([[name]]), called `name` in errors ("inference[2]").
  Table(const toml::value& element, std::string name, std::string file, const std::set<std::string>& allowed,
        bool /*element*/)
      : name_(std::move(name)), file_(std::move(file)) {
    check(element, allowed);
  }
  bool has(const std::string& key) const { return table_ && table_->contains(key); }
  double number(const std::string& key, double fallback, bool required = false) const {
    if (!has(key)) {
      if (required) throw ProfileError(file_ + ": missing key '" + name_ + "." + key + "'");
      return fallback;
    }
    const toml::value& v = table_->at(key);
    if (v.is_floating()) return v.as_floating();
    if (v.is_integer()) return static_cast<double>(v.as_integer());
    throw ProfileError(file_ + ": key '" + name_ + "." + key + "' must be a number, found " + toml::format(v));
  }
  std::string text(const std::string& key, const std::string& fallback, bool required = false) const {
    if (!has(key)) {
      if (required) throw ProfileError(file_ + ": missing key '" + name_ + "." + key + "'");
      return fallback;
    }
    const toml::value& v = table_->at(key);
    if (!v.is_string())
      throw ProfileError(file_ + ": key '" + name_ + "." + key + "' must be a string, found " + toml::format(v));
    return v.as_string().str;
  }
  std::map<std::string, double> numbers(const std::string& key) const {
    std::map<std::string, double> out;
    if (!has(key)) return out;
    const toml::value& v = table_->at(key);
    if (!v.is_table())
      throw ProfileError(file_ + ": key '" + name_ + "." + key + "' must be an inline table {dtype = TFLOPS}");
    for (const auto& [dtype, x] : v.as_table()) {
      if (x.is_floating())
        out[dtype] = x.as_floating();
      else if (x.is_integer())
        out[dtype] = static_cast<double>(x.as_integer());
      else
        throw ProfileError(file_ + ": '" + name_ + "." + key + "." + dtype + "' must be a number");
    }
    return out;
  }

 private:
  void check(const toml::value& t, const std::set<std::string>& allowed) {
    if (!t.is_table()) throw ProfileError(file_ + ": '" + name_ + "' must be a table");
    table_ = &t;
    for (const auto& [key, value] : t.as_table()) {
      (void)value;
      if (!allowed.count(key)) {
        std::string valid;
        for (const auto& k : allowed) valid += (valid.empty() ? "" : ", ") + k;
        throw ProfileError(file_ + ": unknown key '" + name_ + "." + key + "'; valid keys in [" + name_ +
                           "]: " + valid);
      }
    }
  }

  std::string name_, file_;
  const toml::value* table_ = nullptr;
};

void require_positive(double v, const std::string& file, const std::string& key) {
  if (!(v > 0)) throw ProfileError(file + ": '" + key + "' must be positive, found " + std::to_string(v));
}

}  // namespace

HostFacts HostFacts::detect() {
  HostFacts h;
  h.vcpus = static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
  std::ifstream in("/proc/meminfo");
  std::string key;
  double kib = 0;
  while (in >> key >> kib) {
    if (key == "MemTotal:") {
      h.memory_gib = kib / (1024.0 * 1024.0);
      break;
    }
    in.ignore(256, '\n');
  }
  h.isa = launch::CpuIsa::current();
  h.clock_ghz = launch::core_clock_ghz();
  h.cores = launch::cores_online();
  return h;
}

double InstanceProfile::instance_peak_tflops(const std::string& dtype, int devices_in_use) const {
  auto it = peak_tflops.find(dtype);
  if (it == peak_tflops.end()) throw ProfileError(file + ": no peak_tflops figure for dtype '" + dtype + "'");
  if (device_kind == "cpu") return it->second;
  return it->second * (devices_in_use < 0 ? devices : std::min(devices, devices_in_use));
}

double InstanceProfile::power_w(double busy, int devices_in_use) const {
  constexpr double kHostCpuLoad = 0.25;  // assumption: host CPUs feeding devices run at 25 % load
  if (device_kind == "cpu") return cpu_idle_w + (cpu_max_w - cpu_idle_w) * busy + ram_w;
  const int n = devices_in_use < 0 ? devices : devices_in_use;
  return n * (device_idle_w + (device_max_w - device_idle_w) * busy) + cpu_idle_w +
         (cpu_max_w - cpu_idle_w) * kHostCpuLoad + ram_w;
}

namespace {

// The profile file: a path, or NAME.toml under `dir`; an unknown name lists the known ones.
std::string profile_path(const std::string& name_or_path, const std::string& dir) {
  if (fs::is_regular_file(name_or_path)) return name_or_path;
  const std::string path = (fs::path(dir) / (name_or_path + ".toml")).string();
  if (fs::is_regular_file(path)) return path;
  std::string known;
  for (const auto& n : list_instance_profiles(dir)) known += (known.empty() ? "" : ", ") + n;
  throw ProfileError("instance '" + name_or_path + "': no such profile file or " + path +
                     "; known instances: " + known);
}

// [host]: vCPUs and memory (0: this node's), power, price and PUE, per instance or per vCPU / GiB (a generic host).
void read_host(const toml::value& root, const std::string& path, const HostFacts& facts, InstanceProfile& p) {
  const Table host(root, "host", path,
                   {"vcpus", "memory_gib", "cpu_idle_w", "cpu_max_w", "ram_w", "usd_per_hour", "pue",
                    "cpu_idle_w_per_vcpu", "cpu_max_w_per_vcpu", "ram_w_per_gib", "usd_per_vcpu_hour", "clock_ghz"});
  p.vcpus = static_cast<int>(host.number("vcpus", 0));
  p.memory_gib = host.number("memory_gib", 0);
  if (p.vcpus == 0) p.vcpus = facts.vcpus;
  if (p.memory_gib == 0) p.memory_gib = facts.memory_gib;
  // Either per-instance figures or per-vCPU / per-GiB ones (a generic host), never both.
  auto per_instance = [&](const char* total, const char* per_unit, double units) {
    if (host.has(total) && host.has(per_unit))
      throw ProfileError(path + ": set host." + std::string(total) + " or host." + per_unit + ", not both");
    if (host.has(per_unit)) return host.number(per_unit, 0) * units;
    return host.number(total, 0, true);
  };
  p.cpu_idle_w = per_instance("cpu_idle_w", "cpu_idle_w_per_vcpu", p.vcpus);
  p.cpu_max_w = per_instance("cpu_max_w", "cpu_max_w_per_vcpu", p.vcpus);
  p.ram_w = per_instance("ram_w", "ram_w_per_gib", p.memory_gib);
  p.usd_per_hour = per_instance("usd_per_hour", "usd_per_vcpu_hour", p.vcpus);
  p.pue = host.number("pue", 0, true);
  if (p.pue < 1) throw ProfileError(path + ": host.pue must be >= 1, found " + std::to_string(p.pue));
  if (p.cpu_max_w < p.cpu_idle_w) throw ProfileError(path + ": host cpu_max_w is below cpu_idle_w");
  if (p.usd_per_hour < 0) throw ProfileError(path + ": host usd_per_hour is negative");
  if (p.device_kind == "cpu" && host.has("clock_ghz")) {  // read_device ran first
    // A generic host's peaks come from the detected ISA: cores x clock x FLOP per cycle, the cores the profile's vCPUs
    // over the node's threads per core (SMT siblings share one core's FMA units); clock_ghz = 0: measured.
    double ghz = host.number("clock_ghz", 0);
    if (ghz == 0) {
      ghz = facts.clock_ghz;
      if (!(ghz > 0))
        throw ProfileError(path + ": host.clock_ghz is 0 (measure it), but this processor's clock cannot be measured",
                           "set host.clock_ghz to the sustained all-core clock in a copy of the profile (--instance)");
    }
    require_positive(ghz, path, "host.clock_ghz");
    p.clock_ghz = ghz;
    const double cores = std::max(1.0, p.vcpus / facts.threads_per_core());  // one vCPU has a core to itself
    for (const char* dtype : {"fp32", "bf16"})
      p.peak_tflops[dtype] = cores * ghz * launch::cpu_flops_per_cycle(facts.isa, dtype) / 1e3;
  }
}

// [device]: kind, count, power, memory and peak TFLOPS per dtype (a cpu host has no devices).
void read_device(const toml::value& root, const std::string& path, InstanceProfile& p) {
  const Table dev(root, "device", path,
                  {"kind", "model", "count", "idle_w", "max_w", "memory_gib", "memory_gb_per_s", "peak_tflops"});
  p.device_kind = dev.text("kind", "", true);
  if (p.device_kind != "cpu" && p.device_kind != "gpu" && p.device_kind != "trainium" && p.device_kind != "inferentia")
    throw ProfileError(path + ": device.kind is \"" + p.device_kind +
                       "\"; valid values: cpu, gpu, trainium, inferentia");
  p.device_model = dev.text("model", p.device_kind);
  p.devices = static_cast<int>(dev.number("count", 0, true));
  p.device_idle_w = dev.number("idle_w", 0);
  p.device_max_w = dev.number("max_w", 0);
  p.device_memory_gib = dev.number("memory_gib", 0);
  p.device_memory_gb_per_s = dev.number("memory_gb_per_s", 0);
  for (const auto& [dtype, tflops] : dev.numbers("peak_tflops")) p.peak_tflops[dtype] = tflops;
  if (p.device_kind == "cpu") {
    if (p.devices != 0) throw ProfileError(path + ": device.count must be 0 when device.kind is cpu");
  } else {
    require_positive(p.devices, path, "device.count");
    require_positive(p.device_max_w, path, "device.max_w");
    if (p.peak_tflops.empty()) throw ProfileError(path + ": missing key 'device.peak_tflops'");
  }
}

// [network]: intra- and inter-node links, and the efficiencies that calibrate them.
void read_network(const toml::value& root, const std::string& path, InstanceProfile& p) {
  const Table net(root, "network", path,
                  {"intra_node_gb_per_s", "intra_node_latency_us", "inter_node_gb_per_s", "inter_node_latency_us",
                   "intra_node_efficiency", "inter_node_efficiency"});
  p.intra_node_gb_per_s = net.number("intra_node_gb_per_s", 0);
  p.intra_node_latency_us = net.number("intra_node_latency_us", 0);
  p.inter_node_gb_per_s = net.number("inter_node_gb_per_s", 0);
  p.inter_node_latency_us = net.number("inter_node_latency_us", 0);
  p.intra_node_efficiency = net.number("intra_node_efficiency", 1);
  p.inter_node_efficiency = net.number("inter_node_efficiency", 1);
  for (double e : {p.intra_node_efficiency, p.inter_node_efficiency})
    if (!(e > 0 && e <= 1)) throw ProfileError(path + ": network efficiencies must be in (0, 1]");
}

// [calibration]: a published single-node figure (optionally a second one at a long sequence length), another
// profile's calibration to borrow, or an assumed MFU; exactly one of the three.
void read_calibration(const toml::value& root, const std::string& path, InstanceProfile& p) {
  const Table cal(root, "calibration", path,
                  {"model", "seq_len", "dtype", "devices", "global_batch", "seq_per_s", "mfu", "long_seq_len",
                   "long_global_batch", "long_seq_per_s", "borrow"});
  p.calibration_model = cal.text("model", "");
  p.calibration_dtype = cal.text("dtype", "");
  p.calibration_seq_len = static_cast<int64_t>(cal.number("seq_len", 0));
  p.calibration_devices = static_cast<int>(cal.number("devices", 0));
  p.calibration_seq_per_s = cal.number("seq_per_s", 0);
  p.calibration_global_batch = static_cast<int64_t>(cal.number("global_batch", 0));
  p.calibration_mfu = cal.number("mfu", 0);
  p.calibration_long_seq_len = static_cast<int64_t>(cal.number("long_seq_len", 0));
  p.calibration_long_global_batch = static_cast<int64_t>(cal.number("long_global_batch", 0));
  p.calibration_long_seq_per_s = cal.number("long_seq_per_s", 0);
  p.calibration_borrow = cal.text("borrow", "");
  if ((p.calibration_seq_per_s > 0) + (p.calibration_mfu > 0) + !p.calibration_borrow.empty() > 1)
    throw ProfileError(path +
                       ": set one of calibration.seq_per_s (a published figure), calibration.borrow (another profile's "
                       "calibration) or calibration.mfu (an assumption)");
  if (p.calibration_long_seq_per_s > 0 &&
      (p.calibration_seq_per_s <= 0 || p.calibration_long_seq_len <= p.calibration_seq_len))
    throw ProfileError(path +
                       ": calibration.long_seq_per_s needs calibration.seq_per_s and a long_seq_len above seq_len");
  if (p.calibration_seq_per_s > 0 &&
      (p.calibration_model.empty() || p.calibration_seq_len <= 0 || p.calibration_devices <= 0))
    throw ProfileError(path +
                       ": calibration.seq_per_s needs calibration.model, calibration.seq_len and calibration.devices");
}

// [[inference]]: published inference throughputs of the instance, each with what it ran and where it is published.
void read_inference(const toml::value& root, const std::string& path, InstanceProfile& p) {
  if (!root.contains("inference")) return;
  const toml::value& list = root.at("inference");
  if (!list.is_array()) throw ProfileError(path + ": 'inference' must be an array of tables ([[inference]])");
  for (size_t i = 0; i < list.as_array().size(); ++i) {
    const std::string name = "inference[" + std::to_string(i) + "]";
    const Table t(list.as_array()[i], name, path,
                  {"model", "published_as", "seq_len", "batch", "precision", "inferences_per_s", "p50_ms", "p95_ms",
                   "p99_ms", "source"},
                  true);
    auto whole = [&](const char* key) {  // a count: a whole number from 1 to a million
      const double v = t.number(key, 0, true);
      if (!(v >= 1 && v <= 1e6) || std::floor(v) != v)
        throw ProfileError(path + ": '" + name + "." + key + "' must be a whole number from 1 to 1000000, found " +
                           format_number("%g", v));
      return static_cast<int64_t>(v);
    };
    auto finite = [&](const char* key, bool required) {  // a rate or a latency: finite, never negative
      const double v = t.number(key, 0, required);
      if (!std::isfinite(v) || v < 0 || (required && v == 0))
        throw ProfileError(path + ": '" + name + "." + key + "' must be a positive number, found " +
                           format_number("%g", v));
      return v;
    };
    InferenceFigure f;
    f.model = t.text("model", "", true);
    f.published_as = t.text("published_as", f.model);
    f.seq_len = whole("seq_len");
    f.batch = whole("batch");
    f.precision = t.text("precision", "", true);
    f.inferences_per_s = finite("inferences_per_s", true);
    f.p50_ms = finite("p50_ms", false);
    f.p95_ms = finite("p95_ms", false);
    f.p99_ms = finite("p99_ms", false);
    f.source = t.text("source", "", true);
    double below = 0;  // each percentile given is at least the lower ones
    for (const double v : {f.p50_ms, f.p95_ms, f.p99_ms}) {
      if (v < 0 || (v > 0 && v < below))
        throw ProfileError(path + ": " + name + ": latencies must be positive and p50_ms <= p95_ms <= p99_ms");
      below = std::max(below, v);
    }
    p.inference.push_back(f);
  }
}

}  // namespace

InstanceProfile load_instance_profile(const std::string& name_or_path, const std::string& dir, const HostFacts& facts) {
  const std::string path = profile_path(name_or_path, dir);
  const toml::value root = parse_file(path, "instance profile");
  for (const auto& [key, value] : root.as_table()) {
    (void)value;
    static const std::set<std::string> top = {"name",    "description", "host",     "device",
                                              "network", "calibration", "inference"};
    if (!top.count(key))
      throw ProfileError(path + ": unknown key '" + key +
                         "'; valid: name, description, [host], [device], [network], [calibration], [[inference]]");
  }
  InstanceProfile p;
  p.file = path;
  p.name = root.contains("name") && root.at("name").is_string() ? root.at("name").as_string().str : "";
  if (p.name.empty()) throw ProfileError(path + ": missing key 'name' (a string)");
  p.description = root.contains("description") && root.at("description").is_string()
                      ? root.at("description").as_string().str
                      : p.name;
  read_device(root, path, p);
  read_host(root, path, facts, p);
  read_network(root, path, p);
  read_calibration(root, path, p);
  read_inference(root, path, p);
  return p;
}

std::vector<std::string> list_instance_profiles(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (e.path().extension() == ".toml") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

GridRegion load_grid_region(const std::string& region, const std::string& file) {
  const toml::value root = parse_file(file, "grid-intensity");
  if (!root.contains("regions") || !root.at("regions").is_table())
    throw ProfileError(file + ": missing table [regions]");
  const auto& regions = root.at("regions").as_table();
  auto it = regions.find(region);
  if (it == regions.end()) {
    std::string known;
    for (const auto& [name, v] : regions) {
      (void)v;
      known += (known.empty() ? "" : ", ") + name;
    }
    throw ProfileError("region '" + region + "' is not in " + file + "; known regions: " + known,
                       "choose one of those regions (--region, accounting.region), give the grid's intensity "
                       "directly (--grid-intensity G in g CO2/kWh), or add the region to " +
                           file);
  }
  const Table t(root.at("regions"), region, file, {"g_per_kwh", "country", "provider"});
  GridRegion r;
  r.name = region;
  r.g_per_kwh = t.number("g_per_kwh", 0, true);
  r.country = t.text("country", "");
  r.provider = t.text("provider", "");
  return r;
}

}  // namespace joule::cost
