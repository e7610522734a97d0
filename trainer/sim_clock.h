// --device trainium-sim: the numerics run here for real; each step also advances the clock of a simulated
// cluster (sim.instance x sim.nodes), timed by the cluster performance model (trainer/sim/perf_model.h) with the
// gradient buckets this run's reducer launches. Each simulated device does what a rank does here:
// micro_batch x accumulation sequences per step. The buckets and the per-device work are fixed for a run, so
// the prediction is made once and every step advances the clock by the same time. No LibTorch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trainer/cost/run_summary.h"
#include "trainer/sim/perf_model.h"
#include "trainer/sim/sim_options.h"

namespace joule::trainer {

class SimulatedClock {
 public:
  // `per_device`: what one simulated device does per forward/backward (model, sequence length, predictions,
  // micro-batch, the run's target sequences); its global batch follows from `accumulation` and the simulated cluster's
  // devices; its gradient buckets are the reducer's plan for that workload (trainer/sim/perf_model.h
  // planned_buckets). `config_dir`: configs/.
  SimulatedClock(const sim::SimOptions& options, sim::Workload per_device, int64_t accumulation,
                 const std::string& config_dir, double grid_g_per_kwh);

  std::string start_line() const;                      // what rank 0 prints at start
  cost::SimulatedFigures figures(int64_t step) const;  // metrics.jsonl's "sim" and the summary's "simulated"

 private:
  std::optional<sim::ClusterModel> model_;
  sim::Workload workload_;
  sim::StepPrediction step_;
  int64_t nodes_ = 0;
};

}  // namespace joule::trainer
