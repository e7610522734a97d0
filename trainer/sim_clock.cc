#include "trainer/sim_clock.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <sstream>

namespace joule::trainer {
namespace fs = std::filesystem;

SimulatedClock::SimulatedClock(const sim::SimOptions& options, sim::Workload per_device, int64_t accumulation,
                               const std::string& config_dir, double grid_g_per_kwh)
    : workload_(std::move(per_device)), nodes_(options.nodes) {
  model_.emplace(cost::load_instance_profile(options.instance, (fs::path(config_dir) / "hardware").string()),
                 (fs::path(config_dir) / "models").string());
  // The step's rows on the simulated cluster, as sequences (packed rows hold sequences_per_row each on average).
  workload_.global_batch = std::llround(static_cast<double>(workload_.micro_batch * accumulation * options.nodes *
                                                            std::max(1, model_->profile().devices)) *
                                        workload_.sequences_per_row);
  workload_.dtype = "bf16";
  step_ = model_->predict(workload_, static_cast<int>(options.nodes), grid_g_per_kwh);
}

std::string SimulatedClock::start_line() const {
  std::ostringstream s;
  s << "trainium-sim: real numerics here; simulated clock of " << nodes_ << " x " << step_.instance << " ("
    << step_.devices << " devices, global batch " << workload_.global_batch << "): " << step_.step_s << " s per step, "
    << step_.seq_per_hour << " seq/hour (" << model_->efficiency_basis() << ")\n";
  return s.str();
}

cost::SimulatedFigures SimulatedClock::figures(int64_t step) const {
  const sim::StepPrediction& p = step_;
  cost::SimulatedFigures m;
  m.instance = p.instance;
  m.efficiency_basis = model_->efficiency_basis();
  m.nodes = p.nodes;
  m.devices = p.devices;
  m.global_batch = workload_.global_batch;
  m.buckets = static_cast<int64_t>(p.bucket_bytes.size());
  m.sequences = step * workload_.global_batch;
  m.step_s = p.step_s;
  m.compute_s = p.compute_s;
  m.comm_s = p.comm_s;
  m.exposed_comm_s = p.exposed_comm_s;
  m.other_s = p.optimizer_s;
  m.seq_per_s = p.seq_per_s;
  m.clock_s = static_cast<double>(step) * p.step_s;
  m.target_sequences = workload_.sequences;
  m.wall_s_for_target = p.hours * 3600;
  m.kwh_for_target = p.kwh;
  m.usd_for_target = p.usd;
  m.co2_kg_for_target = p.co2_kg;
  return m;
}

}  // namespace joule::trainer
