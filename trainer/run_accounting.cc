#include "trainer/run_accounting.h"

#include <algorithm>
#include <filesystem>

#include "launch/runtime.h"

namespace joule::trainer {
namespace {

cost::MeterContext meter_context(const cost::InstanceProfile& profile, const collectives::ProcessGroupInfo& info,
                                 int cuda_device, const std::string& cuda_pci_bus_id) {
  cost::MeterContext c;
  c.apply_environment();
  c.host = info.local_rank == 0;  // one reader of the host meters per node
  c.device = cuda_device;         // each rank meters its own GPU; -1 (--device cpu): the CPU is the host's
  c.device_pci_bus_id = cuda_pci_bus_id;
  c.profile = profile;
  return c;
}

}  // namespace

RunAccounting::RunAccounting(const cost::AccountingOptions& options, const std::string& device,
                             const std::string& config_dir, const collectives::ProcessGroupInfo& info, int cuda_device,
                             const std::string& cuda_pci_bus_id)
    : cost_(cost::resolve_cost_settings(options, device, config_dir, &profile_)),
      monitor_(options.meters, meter_context(profile_, info, cuda_device, cuda_pci_bus_id),
               options.meter_sample_seconds),
      ranks_(info.world_size),
      nodes_(info.node_count),
      segment_start_(std::chrono::steady_clock::now()),
      segment_started_utc_(cost::utc_now_iso()) {}

void RunAccounting::begin_segment(const std::string& ledger_json, int64_t step, int64_t sequences,
                                  const std::string& project_name) {
  if (!ledger_json.empty()) {
    ledger_ = cost::Ledger::from_json(nlohmann::json::parse(ledger_json), "the checkpoint's ledger");
    for (cost::Segment& g : ledger_.segments)
      if (g.status == "running") g.status = "interrupted (counted to its last checkpoint)";
  }
  if (ledger_.run_id.empty()) ledger_.run_id = cost::new_run_id();
  ledger_.project_name = project_name;
  cost::Segment g;
  g.start_step = g.end_step = step;
  g.ranks = ranks_;
  g.nodes = nodes_;
  g.started_utc = segment_started_utc_;  // when billing began, as wall_s counts
  g.cost = cost_;
  g.meters = monitor_.sources();
  ledger_.segments.push_back(g);
  segment_start_sequences_ = sequences;
}

void RunAccounting::update_segment(const cost::EnergyTotals& energy, int64_t step, int64_t sequences,
                                   const std::string& status) {
  cost::Segment& g = ledger_.segments.back();
  g.energy = energy;
  g.wall_s = launch::seconds_since(segment_start_);
  g.end_step = step;
  g.sequences = sequences - segment_start_sequences_;
  g.ended_utc = cost::utc_now_iso();
  g.status = status;
}

void RunAccounting::set_mfu_basis(double flops_per_sequence, const std::string& dtype) {
  flops_per_sequence_ = flops_per_sequence;
  mfu_dtype_.clear();
  try {
    profile_.instance_peak_tflops(dtype);
    mfu_dtype_ = dtype;
  } catch (const cost::ProfileError&) {
  }
}

double RunAccounting::peak_flops(int ranks, int nodes) const {
  if (mfu_dtype_.empty() || nodes < 1) return 0;
  // The devices that compute: one a rank, at most the instances' devices; a run of one rank on an 8-GPU instance is
  // measured against one GPU's peak (its bill and power are the whole instance's). A CPU instance is one device, and
  // a segment without a rank count (a hand-made ledger) is counted with all its devices.
  if (profile_.device_kind == "cpu" || ranks < 1) return profile_.instance_peak_tflops(mfu_dtype_) * 1e12 * nodes;
  const int devices = std::min(ranks, nodes * profile_.devices);
  return profile_.instance_peak_tflops(mfu_dtype_, 1) * 1e12 * devices;
}

void RunAccounting::set_segment_timing(int64_t timed_sequences, double timed_s) {
  cost::Segment& g = ledger_.segments.back();
  g.timed_sequences = timed_sequences;
  g.timed_s = timed_s;
}

std::optional<double> RunAccounting::mfu(double fallback_seq_per_s) const {
  if (!(peak_flops(ranks_, nodes_) > 0)) return std::nullopt;
  double flops = 0, capacity = 0;  // FLOPs done in timed steps; FLOPs the segments' devices could have done meanwhile
  for (const cost::Segment& g : ledger_.segments) {
    flops += static_cast<double>(g.timed_sequences) * flops_per_sequence_;
    capacity += g.timed_s * peak_flops(g.ranks, g.nodes);
  }
  if (capacity > 0) return flops / capacity;
  return fallback_seq_per_s * flops_per_sequence_ / peak_flops(ranks_, nodes_);
}

nlohmann::json RunAccounting::mfu_json(double fallback_seq_per_s) const {
  const std::optional<double> m = mfu(fallback_seq_per_s);
  return m ? nlohmann::json(*m) : nlohmann::json();
}

}  // namespace joule::trainer
