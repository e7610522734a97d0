// Instance profiles (configs/hardware/*.toml): what a node of a given kind has, draws and costs. Read by
// the accounting (power model, price), the report (projection onto each profile) and the planner. No LibTorch.
#pragma once

#include <cstdint>
#include <map>
#include <stdexcept>
#include <string>

#include <utility>
#include <vector>
#include "launch/cpu_isa.h"

#include "launch/util/error.h"

namespace joule::cost {

class ProfileError : public joule::Error {
 public:
  explicit ProfileError(const std::string& message,
                        std::string hint = "fix the profile file named above, or choose another with --instance")
      : joule::Error(message, std::move(hint)) {}
};

// What a node has when the profile leaves it to detection (vcpus = 0, memory_gib = 0).
struct HostFacts {
  int vcpus = 0;
  double memory_gib = 0;
  launch::CpuIsa isa;    // what the cpu-host profile derives its peak FLOP/s from, with the clock
  double clock_ghz = 0;  // measured (launch::core_clock_ghz); 0: unknown
  int cores = 0;         // the cores behind the online CPUs, SMT siblings once (launch::cores_online); 0: unknown
  static HostFacts
  detect();  // online CPUs and their cores (sched affinity ignored), MemTotal, CpuIsa::current(), clock
  // vCPUs per core on this node (2 with SMT): what a profile's vCPUs are divided by for its peak; 1 where unknown.
  double threads_per_core() const { return cores > 0 && vcpus >= cores ? static_cast<double>(vcpus) / cores : 1.0; }
};

// A published inference throughput of one instance ([[inference]] in a profile under configs/hardware/inference/):
// what ran (the joule preset its FLOPs are counted with, and the model the source names), at which sequence length,
// batch and precision, and how fast; latencies (per batch call) 0 where the source gives none.
struct InferenceFigure {
  std::string model, published_as;
  int64_t seq_len = 0, batch = 0;
  std::string precision;
  double inferences_per_s = 0, p50_ms = 0, p95_ms = 0, p99_ms = 0;
  std::string source;
};

struct InstanceProfile {
  std::string name, description, file;
  // host, all per instance (per-vCPU/per-GiB values already multiplied out)
  int vcpus = 0;
  double memory_gib = 0;
  double cpu_idle_w = 0, cpu_max_w = 0, ram_w = 0;
  double usd_per_hour = 0;
  double pue = 1;
  // devices
  std::string device_kind = "cpu";  // cpu | gpu | trainium | inferentia
  std::string device_model;
  int devices = 0;
  double device_idle_w = 0, device_max_w = 0;
  double device_memory_gib = 0, device_memory_gb_per_s = 0;
  std::map<std::string, double> peak_tflops;  // per device (per instance for kind cpu), by dtype
  double clock_ghz = 0;                       // a cpu host's: the profile's, or measured when it says 0
  // network
  double intra_node_gb_per_s = 0, intra_node_latency_us = 0, inter_node_gb_per_s = 0, inter_node_latency_us = 0;
  double intra_node_efficiency = 1, inter_node_efficiency = 1;  // achievable share of the link bandwidth
  // calibration: a published single-node figure (seq_per_s on `calibration_devices` devices), or an MFU
  std::string calibration_model, calibration_dtype;
  int64_t calibration_seq_len = 0;
  int calibration_devices = 0;
  int64_t calibration_global_batch = 0;
  double calibration_seq_per_s = 0, calibration_mfu = 0;
  // A second single-node figure at a long sequence length (phase 2, 512), same model, devices and dtype: long
  // sequences get their own efficiency (interpolated in log(seq_len) between the two lengths).
  int64_t calibration_long_seq_len = 0, calibration_long_global_batch = 0;
  double calibration_long_seq_per_s = 0;
  // Or: the efficiencies of another profile's calibration, computed the same way (no figure for this hardware).
  std::string calibration_borrow;
  // inference: published throughputs (an inference profile's; training profiles have none)
  std::vector<InferenceFigure> inference;

  // Peak TFLOPS of one instance for a dtype, `devices_in_use` of its devices computing (-1: all; a CPU instance is one
  // device, whole); throws naming the profile when it has no figure.
  double instance_peak_tflops(const std::string& dtype, int devices_in_use = -1) const;
  double max_power_w() const { return cpu_max_w + ram_w + devices * device_max_w; }
  // IT power of one instance whose devices compute a share `busy` of the time (idle to maximum power), `devices` of
  // them in use (-1: all): the host CPU feeding them at a light load, or, where the CPU is the device, by `busy`; RAM
  // constant.
  double power_w(double busy, int devices_in_use = -1) const;
};

// `name_or_path`: a file, or NAME looked up as DIR/NAME.toml. Unknown keys, missing required keys and wrong
// types are errors naming the file and the key.
InstanceProfile load_instance_profile(const std::string& name_or_path, const std::string& dir,
                                      const HostFacts& host = HostFacts::detect());
// Every NAME.toml in `dir`, sorted.
std::vector<std::string> list_instance_profiles(const std::string& dir);

// A region of configs/grid-intensity.toml: carbon intensity and what emissions.csv says about it.
struct GridRegion {
  std::string name, country, provider;
  double g_per_kwh = 0;
};
// Throws listing the known regions.
GridRegion load_grid_region(const std::string& region, const std::string& file);

}  // namespace joule::cost
