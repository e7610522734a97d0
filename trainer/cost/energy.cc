#include "trainer/cost/energy.h"
#include "launch/util/options.h"

#include <dlfcn.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

namespace joule::cost {
namespace fs = std::filesystem;
namespace {

std::string read_first_line(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    const int err = errno;
    throw MeterUnavailable(path + ": " + (err == EACCES ? "permission denied" : std::strerror(err)));
  }
  std::string line;
  std::getline(in, line);
  return line;
}

double read_number(const std::string& path) {
  const std::string text = read_first_line(path);
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end == text.c_str()) throw MeterUnavailable(path + ": not a number: '" + text + "'");
  return v;
}

// ---- rapl: powercap energy counters (µJ), package -> cpu, dram -> ram -----------------------------------
class RaplMeter final : public EnergyMeter {
 public:
  explicit RaplMeter(const MeterContext& ctx) {
    const fs::path root = ctx.powercap_root;
    std::error_code ec;
    if (!fs::is_directory(root, ec))
      throw MeterUnavailable("rapl: no " + root.string() + " (usual in VMs and containers)");
    // /sys/class/powercap lists every zone at the top level (intel-rapl:N, intel-rapl:N:M), as symlinks.
    std::map<std::string, fs::path> zones;
    for (const auto& e : fs::directory_iterator(root, ec)) {
      const std::string n = e.path().filename().string();
      if (n.rfind("intel-rapl:", 0) == 0 && fs::exists(e.path() / "energy_uj")) zones.emplace(n, e.path());
    }
    if (zones.empty())
      throw MeterUnavailable("rapl: no intel-rapl domains under " + root.string() + " (usual in cloud VMs)");
    for (const auto& [id, dir] : zones) {
      const std::string name = read_first_line((dir / "name").string());
      Component c;
      if (name.rfind("package", 0) == 0)
        c = Component::cpu;
      else if (name == "dram")
        c = Component::ram;
      else
        continue;  // core/uncore are inside the package; psys would double count
      Counter k{c, (dir / "energy_uj").string(), read_number((dir / "max_energy_range_uj").string())};
      try {
        k.last = read_number(k.path);
      } catch (const MeterUnavailable& e) {
        throw MeterUnavailable(std::string("rapl: ") + e.what() +
                               (std::string(e.what()).find("permission") != std::string::npos
                                    ? " (root-only since Linux 5.10, CVE-2020-8694)"
                                    : ""));
      }
      counters_.push_back(k);
      components_.insert(c);
    }
    if (!components_.count(Component::cpu)) throw MeterUnavailable("rapl: no package domain under " + root.string());
  }
  std::string name() const override { return "rapl"; }
  std::set<Component> components() const override { return components_; }
  void sample(double, EnergyTotals& into) override {
    for (Counter& k : counters_) {
      const double now = read_number(k.path);
      // The counter wraps at max_energy_range_uj; sampled often enough, at most once between two reads.
      const double delta = now >= k.last ? now - k.last : k.range - k.last + now;
      k.last = now;
      into.at(k.component, Source::rapl) += delta * 1e-6;
    }
  }

 private:
  struct Counter {
    Component component;
    std::string path;
    double range = 0, last = 0;
  };
  std::vector<Counter> counters_;
  std::set<Component> components_;
};

// ---- nvml: libnvidia-ml.so.1 loaded at run time --------------------------------------------------------
class NvmlMeter final : public EnergyMeter {
  using Device = void*;
  using InitFn = int (*)();
  using HandleFn = int (*)(unsigned, Device*);
  using HandleByPciFn = int (*)(const char*, Device*);
  using EnergyFn = int (*)(Device, unsigned long long*);
  using PowerFn = int (*)(Device, unsigned*);
  static constexpr int kNotSupported = 3;  // NVML_ERROR_NOT_SUPPORTED

 public:
  explicit NvmlMeter(const MeterContext& ctx) : device_index_(ctx.device) {
    if (ctx.device < 0) throw MeterUnavailable("nvml: this process has no GPU");
    lib_ = dlopen(ctx.nvml_library.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib_) throw MeterUnavailable("nvml: cannot load " + ctx.nvml_library + " (no NVIDIA driver here)");
    auto sym = [&](const char* n) {
      void* p = dlsym(lib_, n);
      if (!p) throw MeterUnavailable("nvml: " + ctx.nvml_library + " lacks " + n);
      return p;
    };
    try {
      auto init = reinterpret_cast<InitFn>(sym("nvmlInit_v2"));
      shutdown_ = reinterpret_cast<InitFn>(sym("nvmlShutdown"));
      auto handle = reinterpret_cast<HandleFn>(sym("nvmlDeviceGetHandleByIndex_v2"));
      auto handle_by_pci = reinterpret_cast<HandleByPciFn>(sym("nvmlDeviceGetHandleByPciBusId_v2"));
      energy_ = reinterpret_cast<EnergyFn>(sym("nvmlDeviceGetTotalEnergyConsumption"));
      power_ = reinterpret_cast<PowerFn>(sym("nvmlDeviceGetPowerUsage"));
      if (int rc = init(); rc != 0) throw MeterUnavailable("nvml: nvmlInit_v2 failed with code " + std::to_string(rc));
      initialized_ = true;
      if (!ctx.device_pci_bus_id.empty()) {
        if (int rc = handle_by_pci(ctx.device_pci_bus_id.c_str(), &device_); rc != 0)
          throw MeterUnavailable("nvml: no device at PCI bus id " + ctx.device_pci_bus_id + " (code " +
                                 std::to_string(rc) + ")");
      } else if (int rc = handle(static_cast<unsigned>(ctx.device), &device_); rc != 0) {
        throw MeterUnavailable("nvml: no device " + std::to_string(ctx.device) + " (code " + std::to_string(rc) + ")");
      }
      unsigned long long mj = 0;
      const int rc = energy_(device_, &mj);
      if (rc == kNotSupported)
        power_only_ = true;  // pre-Volta: integrate power samples
      else if (rc != 0)
        throw MeterUnavailable("nvml: nvmlDeviceGetTotalEnergyConsumption failed with code " + std::to_string(rc));
      last_mj_ = mj;
    } catch (...) {
      close();
      throw;
    }
  }
  ~NvmlMeter() override { close(); }
  std::string name() const override { return power_only_ ? "nvml (power samples)" : "nvml"; }
  std::set<Component> components() const override { return {Component::gpu}; }
  void sample(double dt_s, EnergyTotals& into) override {
    // A failed read throws: the monitor counts it and the summary names it (EnergyMonitor::notices).
    if (power_only_) {
      unsigned mw = 0;
      if (const int rc = power_(device_, &mw); rc != 0)
        throw MeterUnavailable("nvml: nvmlDeviceGetPowerUsage failed with code " + std::to_string(rc));
      into.at(Component::gpu, Source::nvml) += mw * 1e-3 * dt_s;
      return;
    }
    unsigned long long mj = 0;
    if (const int rc = energy_(device_, &mj); rc != 0)
      throw MeterUnavailable("nvml: nvmlDeviceGetTotalEnergyConsumption failed with code " + std::to_string(rc));
    if (mj >= last_mj_) into.at(Component::gpu, Source::nvml) += static_cast<double>(mj - last_mj_) * 1e-3;
    last_mj_ = mj;
  }

 private:
  void close() {
    if (initialized_ && shutdown_) shutdown_();
    initialized_ = false;
    if (lib_) dlclose(lib_);
    lib_ = nullptr;
  }
  int device_index_;
  void* lib_ = nullptr;
  Device device_ = nullptr;
  InitFn shutdown_ = nullptr;
  EnergyFn energy_ = nullptr;
  PowerFn power_ = nullptr;
  bool initialized_ = false, power_only_ = false;
  unsigned long long last_mj_ = 0;
};

// ---- neuron: percent of maximum power from sysfs x the profile's maximum watts (estimated) --------------
class NeuronMeter final : public EnergyMeter {
 public:
  explicit NeuronMeter(const MeterContext& ctx) : max_w_(ctx.profile.device_max_w) {
    if (ctx.device < 0) throw MeterUnavailable("neuron: this process has no Neuron device");
    path_ = (fs::path(ctx.neuron_root) / ("neuron" + std::to_string(ctx.device)) / "stats" / "power" / "utilization")
                .string();
    if (!fs::exists(path_)) throw MeterUnavailable("neuron: no " + path_ + " (no Neuron driver here)");
    if (!(max_w_ > 0))
      throw MeterUnavailable("neuron: the instance profile has no device.max_w to turn percent into watts");
    percent();  // validates the format now
  }
  std::string name() const override { return "neuron (estimated: % of max power x profile max_w)"; }
  std::set<Component> components() const override { return {Component::neuron}; }
  void sample(double dt_s, EnergyTotals& into) override {
    into.at(Component::neuron, Source::neuron) += percent() / 100.0 * max_w_ * dt_s;
  }

 private:
  // "<status>,<timestamp>,<min>,<max>,<avg>", percent of maximum power, updated each minute.
  double percent() const {
    const std::string line = read_first_line(path_);
    std::vector<std::string> f;
    std::stringstream ss(line);
    for (std::string item; std::getline(ss, item, ',');) f.push_back(item);
    char* end = nullptr;
    const double avg = f.size() == 5 ? std::strtod(f[4].c_str(), &end) : 0;
    if (f.size() != 5 || end == f[4].c_str())
      throw MeterUnavailable("neuron: " + path_ + ": expected <status>,<timestamp>,<min>,<max>,<avg>, found '" + line +
                             "'");
    return avg;
  }
  std::string path_;
  double max_w_;
};

// ---- model: the instance profile's watts x measured utilization ----------------------------------------
class ModelMeter final : public EnergyMeter {
 public:
  ModelMeter(const MeterContext& ctx, std::set<Component> components)
      : profile_(ctx.profile), proc_stat_(ctx.proc_stat), components_(std::move(components)) {
    if (components_.count(Component::cpu)) cpu_times(&last_busy_, &last_total_);
  }
  std::string name() const override { return "model"; }
  std::set<Component> components() const override { return components_; }
  void sample(double dt_s, EnergyTotals& into) override {
    if (components_.count(Component::cpu)) {
      double busy = 0, total = 0;
      cpu_times(&busy, &total);
      const double util = total > last_total_ ? (busy - last_busy_) / (total - last_total_) : 0;
      last_busy_ = busy;
      last_total_ = total;
      into.at(Component::cpu, Source::model) +=
          (profile_.cpu_idle_w + (profile_.cpu_max_w - profile_.cpu_idle_w) * util) * dt_s;
    }
    if (components_.count(Component::ram)) into.at(Component::ram, Source::model) += profile_.ram_w * dt_s;
    // Device utilization is not known here: a training device is taken as busy (its maximum).
    for (Component c : {Component::gpu, Component::neuron})
      if (components_.count(c)) into.at(c, Source::model) += profile_.device_max_w * dt_s;
  }

 private:
  // /proc/stat "cpu user nice system idle iowait irq softirq steal ..." in ticks: busy = all but idle, iowait and
  // steal. Steal is time the hypervisor ran other tenants on this VM's cores: their work, not this run's, so it
  // stays in the total (the time that passed) but never counts as busy.
  void cpu_times(double* busy, double* total) const {
    std::istringstream in(read_first_line(proc_stat_));
    std::string label;
    in >> label;
    if (label != "cpu") throw MeterUnavailable("model: " + proc_stat_ + ": first line is not the 'cpu' total");
    double v[8] = {0};
    for (double& x : v) in >> x;
    double sum = 0;
    for (double x : v) sum += x;
    *total = sum;
    *busy = sum - v[3] - v[4] - v[7];
  }
  InstanceProfile profile_;
  std::string proc_stat_;
  std::set<Component> components_;
  double last_busy_ = 0, last_total_ = 0;
};

}  // namespace

const char* component_name(Component c) {
  static const char* names[] = {"cpu", "ram", "gpu", "neuron"};
  return names[static_cast<int>(c)];
}
const char* source_name(Source s) {
  static const char* names[] = {"rapl", "nvml", "neuron", "model"};
  return names[static_cast<int>(s)];
}

double EnergyTotals::component(Component c) const {
  double j = 0;
  for (int s = 0; s < kSources; ++s) j += at(c, static_cast<Source>(s));
  return j;
}
double EnergyTotals::total() const {
  double j = 0;
  for (double x : joules) j += x;
  return j;
}
EnergyTotals& EnergyTotals::operator+=(const EnergyTotals& o) {
  for (size_t i = 0; i < joules.size(); ++i) joules[i] += o.joules[i];
  return *this;
}
EnergyTotals EnergyTotals::operator-(const EnergyTotals& o) const {
  EnergyTotals r = *this;
  for (size_t i = 0; i < joules.size(); ++i) r.joules[i] -= o.joules[i];
  return r;
}

void MeterContext::apply_environment() {
  if (const char* v = std::getenv("JOULE_POWERCAP_ROOT")) powercap_root = v;
  if (const char* v = std::getenv("JOULE_PROC_STAT")) proc_stat = v;
  if (const char* v = std::getenv("JOULE_NEURON_ROOT")) neuron_root = v;
  if (const char* v = std::getenv("JOULE_NVML_LIBRARY")) nvml_library = v;
}

std::set<Component> responsibilities(const MeterContext& ctx) {
  std::set<Component> out;
  if (ctx.host) out = {Component::cpu, Component::ram};
  if (ctx.device >= 0 && ctx.profile.device_kind == "gpu") out.insert(Component::gpu);
  if (ctx.device >= 0 && (ctx.profile.device_kind == "trainium" || ctx.profile.device_kind == "inferentia"))
    out.insert(Component::neuron);
  return out;
}

std::unique_ptr<EnergyMeter> create_energy_meter(const std::string& name, const MeterContext& ctx,
                                                 const std::set<Component>& model_components) {
  if (name == "rapl") return std::make_unique<RaplMeter>(ctx);
  if (name == "nvml") return std::make_unique<NvmlMeter>(ctx);
  if (name == "neuron") return std::make_unique<NeuronMeter>(ctx);
  if (name == "model") return std::make_unique<ModelMeter>(ctx, model_components);
  throw RunConfigError("energy meter '" + name + "' is unknown; valid meters: rapl, nvml, neuron, model");
}

EnergyMonitor::EnergyMonitor(const std::string& meters, const MeterContext& ctx, double sample_seconds)
    : sample_seconds_(sample_seconds) {
  std::vector<std::string> wanted;
  if (meters == "auto") {
    wanted = {"rapl", "nvml", "neuron"};
  } else {
    std::stringstream ss(meters);
    for (std::string m; std::getline(ss, m, ',');) {
      if (m != "rapl" && m != "nvml" && m != "neuron" && m != "model")
        throw RunConfigError("accounting.meters: '" + m +
                             "' is unknown; valid: auto or a list of rapl, nvml, neuron, model");
      if (m != "model") wanted.push_back(m);
    }
  }
  std::set<Component> uncovered = responsibilities(ctx);
  for (const std::string& m : wanted) {
    // A meter only for what this process is responsible for: host meters on one process per node.
    if ((m == "rapl" && !ctx.host) || (m == "nvml" && !uncovered.count(Component::gpu)) ||
        (m == "neuron" && !uncovered.count(Component::neuron)))
      continue;
    try {
      auto meter = create_energy_meter(m, ctx);
      for (Component c : meter->components()) {
        uncovered.erase(c);
        sources_.emplace_back(c, meter->name());
      }
      meters_.push_back(std::move(meter));
    } catch (const MeterUnavailable& e) {
      notices_.push_back(std::string(e.what()) + "; using the model");
    }
  }
  if (!uncovered.empty()) {
    auto model = create_energy_meter("model", ctx, uncovered);
    for (Component c : uncovered) sources_.emplace_back(c, "model");
    meters_.push_back(std::move(model));
  }
  std::lock_guard<std::mutex> lock(mutex_);
  EnergyTotals baseline;
  for (auto& m : meters_) m->sample(0, baseline);  // sets each meter's baseline
  last_ = std::chrono::steady_clock::now();
  if (!meters_.empty()) thread_ = std::thread([this] { run(); });
}

EnergyMonitor::~EnergyMonitor() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void EnergyMonitor::sample_locked() {
  const auto now = std::chrono::steady_clock::now();
  const double dt = std::chrono::duration<double>(now - last_).count();
  last_ = now;
  for (auto& m : meters_) {
    try {
      m->sample(dt, totals_);
    } catch (const std::exception& e) {
      // A counter that becomes unreadable mid-run: the run goes on, the summary says so (notices()).
      Failures& f = failures_[m->name()];
      ++f.count;
      f.last = e.what();
    }
  }
}

void EnergyMonitor::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    wake_.wait_for(lock, std::chrono::duration<double>(sample_seconds_), [this] { return stop_; });
    if (!stop_) sample_locked();
  }
}

EnergyTotals EnergyMonitor::totals() {
  std::lock_guard<std::mutex> lock(mutex_);
  sample_locked();
  return totals_;
}

std::vector<std::string> EnergyMonitor::notices() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> out = notices_;
  for (const auto& [name, f] : failures_)
    out.push_back(name + ": " + std::to_string(f.count) + " reading(s) failed during the run (last: " + f.last +
                  "); energy between the readings around them may be missing");
  return out;
}

std::string EnergyMonitor::sources() const {
  std::string s;
  for (const auto& [c, name] : sources_) s += (s.empty() ? "" : ", ") + std::string(component_name(c)) + ": " + name;
  return s.empty() ? "none (this process reads no meters)" : s;
}

}  // namespace joule::cost
