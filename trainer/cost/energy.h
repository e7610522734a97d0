// Energy meters behind one interface, sampled on a background thread. Every joule carries its component
// (cpu, ram, gpu, neuron) and its source (rapl, nvml, neuron, model): measured where the machine allows,
// a labelled model otherwise. Host meters are read by one process per node (local rank 0), device meters
// by each process for its own device, so sums over ranks never count anything twice. No LibTorch.
#pragma once

#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "launch/util/error.h"
#include "trainer/cost/hardware.h"

namespace joule::cost {

enum class Component { cpu = 0, ram = 1, gpu = 2, neuron = 3 };
enum class Source { rapl = 0, nvml = 1, neuron = 2, model = 3 };
inline constexpr int kComponents = 4, kSources = 4;
const char* component_name(Component c);
const char* source_name(Source s);

struct EnergyTotals {
  std::array<double, kComponents * kSources> joules{};  // [component][source]
  double& at(Component c, Source s) { return joules[static_cast<int>(c) * kSources + static_cast<int>(s)]; }
  double at(Component c, Source s) const { return joules[static_cast<int>(c) * kSources + static_cast<int>(s)]; }
  double component(Component c) const;
  double total() const;
  EnergyTotals& operator+=(const EnergyTotals& o);
  EnergyTotals operator-(const EnergyTotals& o) const;
};

// Where the meters look and what this process is responsible for. Developers and tests point the paths at
// fake trees with JOULE_POWERCAP_ROOT, JOULE_PROC_STAT, JOULE_NEURON_ROOT and JOULE_NVML_LIBRARY.
struct MeterContext {
  std::string powercap_root = "/sys/class/powercap";
  std::string proc_stat = "/proc/stat";
  std::string neuron_root = "/sys/devices/virtual/neuron_device";
  std::string nvml_library = "libnvidia-ml.so.1";
  bool host = true;  // reads this node's host meters (cpu, ram)
  int device = -1;   // index of this process's own device (gpu or neuron), -1: none
  // The GPU's PCI bus id as CUDA names it ("00000000:3B:00.0"): NVML finds the device by it, since CUDA's index and
  // NVML's differ when CUDA_VISIBLE_DEVICES renumbers the GPUs (Slurm's per-task binding). Empty: by `device`.
  std::string device_pci_bus_id;
  InstanceProfile profile;  // watts for the model and for Neuron's percent-of-maximum readings
  void apply_environment();
};

class MeterUnavailable : public joule::Error {
 public:
  explicit MeterUnavailable(const std::string& message,
                            std::string hint = "the energy model covers what this meter would have measured")
      : joule::Error(message, std::move(hint)) {}
};

class EnergyMeter {
 public:
  virtual ~EnergyMeter() = default;
  virtual std::string name() const = 0;
  virtual std::set<Component> components() const = 0;
  // Adds the energy used since the previous call to `into`; the first call only sets the baseline.
  // `dt_s`: seconds since the previous call.
  virtual void sample(double dt_s, EnergyTotals& into) = 0;
};

// "rapl" | "nvml" | "neuron" | "model". The model meter covers `model_components`. Throws MeterUnavailable
// with a one-line reason (absent, permission denied, no library).
std::unique_ptr<EnergyMeter> create_energy_meter(const std::string& name, const MeterContext& context,
                                                 const std::set<Component>& model_components = {});

// The components this process must account for: cpu and ram when it reads the host, its device's.
std::set<Component> responsibilities(const MeterContext& context);

// Samples the chosen meters every `sample_seconds` on its own thread. `meters`: "auto" (every real meter this
// process is responsible for, the model for the rest) or a comma list; the model always fills the gaps.
class EnergyMonitor {
 public:
  EnergyMonitor(const std::string& meters, const MeterContext& context, double sample_seconds);
  ~EnergyMonitor();
  EnergyMonitor(const EnergyMonitor&) = delete;
  EnergyMonitor& operator=(const EnergyMonitor&) = delete;

  EnergyTotals totals();  // samples now, then returns everything since construction
  // Why a meter fell back at start, and which meters failed readings during the run (with how many).
  std::vector<std::string> notices();
  std::string sources() const;  // "cpu: rapl, ram: model"

 private:
  void sample_locked();
  void run();
  std::vector<std::unique_ptr<EnergyMeter>> meters_;
  std::vector<std::string> notices_;
  struct Failures {
    int64_t count = 0;
    std::string last;
  };
  std::map<std::string, Failures> failures_;  // by meter name: readings that failed mid-run
  std::vector<std::pair<Component, std::string>> sources_;
  EnergyTotals totals_;
  double sample_seconds_;
  std::chrono::steady_clock::time_point last_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace joule::cost
