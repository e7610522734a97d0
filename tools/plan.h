// `joule plan`: the cluster performance model for a workload on N instances of each profile, side by side
// (hours, seq/hour, kWh, USD, CO2 and the step's time breakdown), a scaling curve over node counts, and the
// validation of the model against published figures (trainer/sim/validation.h).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "trainer/optimizer_options.h"

namespace joule::tools {

struct PlanOptions {
  std::string model = "bert-large";
  int64_t seq_len = 128;
  int64_t max_predictions = 0;  // 0: NVIDIA's for the sequence length
  int64_t global_batch = 65536;
  int64_t micro_batch = 32;
  double sequences = 450e6;
  std::string precision = "bf16";
  trainer::OptimizerSharding shard = trainer::OptimizerSharding::none;  // optimizer.shard
  int nodes = 16;
  std::vector<std::string>
      instances;  // NAME or NAME:PRECISION (that row's precision); empty: every accelerator profile
  std::string region = "world";
  double grid_intensity = 0;
  std::vector<int> scaling = {1, 2, 4, 8, 16, 32, 64};
  // Packing (data/pack.h): the real tokens' share of the rows' tokens, padded (one sequence a row) and packed. Both
  // > 0: every instance gets a packed row beside its padded one, the packed rows holding packed / padded as many
  // sequences each (a step trains --global-batch sequences either way).
  double padded_efficiency = 0, packed_efficiency = 0;
};

// The padded and packed efficiencies a packed data set's metadata.json records (`joule data pack`, `joule data create
// --pack`): DIR/metadata.json or DIR's parent's (DIR/train given). UsageError naming the file when it has none.
std::pair<double, double> packing_of(const std::string& data_dir);

// The table, the breakdown and the scaling curve as text; or {"rows": [...], "scaling": [...]} as JSON.
std::string plan_text(const PlanOptions& options, const std::string& config_dir);
std::string plan_json(const PlanOptions& options, const std::string& config_dir);

}  // namespace joule::tools
