// The accounting stage of `joule train`: what the run is billed as (instance profile, price, PUE, grid), the
// energy meters (started with it, so start-up is billed), and the ledger's current segment, brought up to date
// with energy summed over ranks at step boundaries. No LibTorch.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "collectives/communicator.h"
#include "trainer/cost/accounting.h"
#include "trainer/cost/energy.h"
#include "trainer/cost/hardware.h"

namespace joule::trainer {

class RunAccounting {
 public:
  // Resolves the cost settings and starts the meters (host meters on local rank 0 of each node).
  // `cuda_device` and `cuda_pci_bus_id`: the GPU this rank trains on (NVML meters it, found by its bus id), -1 for
  // none. `device`: train.device (an instance profile of "auto" follows it).
  RunAccounting(const cost::AccountingOptions& options, const std::string& device, const std::string& config_dir,
                const collectives::ProcessGroupInfo& info, int cuda_device = -1,
                const std::string& cuda_pci_bus_id = "");

  const cost::CostSettings& cost() const { return cost_; }
  const cost::InstanceProfile& profile() const { return profile_; }
  cost::EnergyMonitor& meters() { return monitor_; }
  cost::EnergyTotals local_energy() { return monitor_.totals(); }  // this process's meters since start

  // Opens this process's segment of the ledger: a resumed run's ledger (`ledger_json` from its checkpoint, its
  // running segments marked interrupted) or a new one.
  void begin_segment(const std::string& ledger_json, int64_t step, int64_t sequences, const std::string& project_name);
  // Brings the current segment up to `step`/`sequences` with `energy` summed over ranks.
  void update_segment(const cost::EnergyTotals& energy, int64_t step, int64_t sequences, const std::string& status);
  // The current segment's timed steps so far (after its warm-up): what the run's throughput and MFU are over.
  void set_segment_timing(int64_t timed_sequences, double timed_s);
  cost::Ledger& ledger() { return ledger_; }

  // MFU against the peak for `dtype` of the devices in use: over every segment's timed steps, each against the peak
  // of its own nodes and ranks per node (one device per rank, at most the instance's); when no step was timed yet,
  // `fallback_seq_per_s` against this segment's. None without a peak for the device and dtype (json: null).
  void set_mfu_basis(double flops_per_sequence, const std::string& dtype);
  std::optional<double> mfu(double fallback_seq_per_s) const;
  nlohmann::json mfu_json(double fallback_seq_per_s) const;

 private:
  cost::InstanceProfile profile_;
  cost::CostSettings cost_;
  cost::EnergyMonitor monitor_;
  cost::Ledger ledger_;
  int ranks_, nodes_;
  std::chrono::steady_clock::time_point segment_start_;
  std::string segment_started_utc_;
  int64_t segment_start_sequences_ = 0;
  double flops_per_sequence_ = 0;
  std::string mfu_dtype_;  // the dtype whose peak MFU is measured against; empty: no peak figure
  // The peak FLOP/s of `nodes` instances running `ranks` ranks between them; 0 without a peak figure.
  double peak_flops(int ranks, int nodes) const;
};

}  // namespace joule::trainer
