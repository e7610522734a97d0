// The training-cost summary of a run as one typed struct: what `joule train` writes as RUN/summary.json at the end,
// and what `joule summary` and `joule report` read back. Its renderings: the aligned table printed at the end of a
// run and CodeCarbon-style emissions.csv rows (one per segment). JSON is read with checked access: a missing key or
// a value of another type names summary.json and the key. Also the metrics history of metrics.jsonl that the
// report charts. No LibTorch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trainer/cost/accounting.h"

namespace joule::cost {

// summary.json's "schema_version": 2 added it, timed_sequences and timed_s (the run's and each segment's); 3 added
// "memory"; 4 renamed projection.card_450M to projection.full_pretraining_450M (the old name is still read). A key is
// added or renamed with a new version, never removed; a reader refuses a version newer than its own.
inline constexpr int64_t kSummarySchemaVersion = 4;

// What emissions.csv says about one node.
struct HostInfo {
  std::string os, cpu_model, device_model;
  int64_t vcpus = 0, devices = 0;
  double memory_gib = 0;
  nlohmann::json gemm;  // a CPU run's GEMM paths and rates (trainer/run_setup.h gemm_record); null otherwise
};

// What was trained.
struct WorkloadInfo {
  std::string model, dtype = "fp32";
  int64_t seq_len = 0, max_predictions = 0, global_batch = 0;
  double flops_per_sequence = 0;
  int64_t pack = 0;               // packed rows: up to `pack` sequences a row; 0: one sequence a row, padded
  double packing_efficiency = 0;  // real tokens of the rows' tokens (0: not recorded)
};

// An evaluation over the eval shards (metrics.jsonl's "eval" rows and the summary's last eval).
struct EvalFigures {
  double mlm_loss = 0, nsp_loss = 0, loss = 0, mlm_accuracy = 0, nsp_accuracy = 0;
  int64_t sequences = 0;
  nlohmann::json to_json() const;
  static EvalFigures from_json(const nlohmann::json& j, const std::string& where);
};

// eval.target_mlm_accuracy's outcome, MLPerf's time to train: the first eval at or above the target (reached), or the
// run's last eval when its steps ended short of it.
struct TargetAccuracy {
  double target = 0, mlm_accuracy = 0;
  bool reached = false;
  int64_t step = 0, sequences = 0;  // that eval's step and the training sequences by then
  double wall_s = 0;         // training wall time by then: every segment's up to its last checkpoint, and this one's
  std::string text() const;  // "reached: 0.7124 >= 0.7000 held-out masked-LM accuracy at ..."
  nlohmann::json to_json() const;
  static TargetAccuracy from_json(const nlohmann::json& j, const std::string& where);
};

// The simulated cluster of --device trainium-sim (metrics.jsonl's "sim" and the summary's "simulated"): predicted,
// never measured.
struct SimulatedFigures {
  std::string instance, efficiency_basis;
  int64_t nodes = 0, devices = 0, global_batch = 0, buckets = 0, sequences = 0;
  double step_s = 0, compute_s = 0, comm_s = 0, exposed_comm_s = 0, other_s = 0, seq_per_s = 0, clock_s = 0;
  double target_sequences = 0, wall_s_for_target = 0, kwh_for_target = 0, usd_for_target = 0, co2_kg_for_target = 0;
  nlohmann::json to_json() const;
  static SimulatedFigures from_json(const nlohmann::json& j, const std::string& where);
};

// Memory per rank in the last segment: each process's peak resident set (ru_maxrss), the optimizer state it holds
// (the whole of it, or 1/N with optimizer.shard = zero1) and, on GPUs, the caching allocator's peak.
struct MemoryFigures {
  std::string optimizer_shard = "none";
  double peak_rss_bytes_max = 0, peak_rss_bytes_min = 0;  // over the ranks
  double optimizer_state_bytes_per_rank = 0;              // the largest rank's
  double peak_device_bytes_max = 0;                       // 0: not a GPU run
  nlohmann::json to_json() const;
  static MemoryFigures from_json(const nlohmann::json& j, const std::string& where);
};

struct RunSummary {
  std::string run_dir, status;
  int64_t ranks = 0, nodes = 0, steps = 0, sequences = 0, segments = 1, nonfinite_skipped_steps = 0,
          target_sequences = 0;
  double wall_s = 0;     // training wall time over every segment
  double seq_per_s = 0;  // measured after the warm-up steps
  std::optional<double> mfu;
  bool preempted = false;
  WorkloadInfo workload;
  HostInfo host;
  // Every segment and the projection history; spent figures, energy and billed wall time derive from it.
  Ledger ledger;
  // The run's own target; the 450M sequences of a full BERT pretraining (NVIDIA's phase-1 recipe), hypothetical: both
  // of this run's model on this run's cluster at its measured rates.
  Projection target, full_pretraining;
  std::vector<std::string> notices;
  std::optional<EvalFigures> eval;
  std::optional<TargetAccuracy> target_accuracy;  // with eval.target_mlm_accuracy set
  std::optional<SimulatedFigures> simulated;
  MemoryFigures memory;   // zeros in summaries of joules before schema 3
  std::string final_dir;  // empty when preempted

  const CostSettings& instance() const;  // the last segment's (what the run is billed as now)
  nlohmann::json to_json() const;
  // `where`: the file it came from, for errors (joule::Error naming it and the key).
  static RunSummary from_json(const nlohmann::json& j, const std::string& where);
};

// RUN_DIR/summary.json, read and checked. IoError when absent; joule::Error naming the file for invalid JSON or a
// missing key.
RunSummary read_run_summary(const std::string& run_dir);

// The aligned training-cost table; emissions.csv (header + one row per segment).
std::string summary_table(const RunSummary& summary);
std::string emissions_csv(const RunSummary& summary);
extern const char* const kEmissionsCsvHeader;

// metrics.jsonl as the report charts it: one training row per logged step and one eval row per eval; a step logged
// twice (work redone after a crash) keeps its last row.
struct TrainPoint {
  int64_t step = 0;
  double sequences = 0, wall_s = 0, loss = 0, mlm_acc = 0, seq_per_s = 0;
};
struct EvalPoint {
  int64_t step = 0;
  EvalFigures eval;
  double sequences = -1, wall_s = -1;  // the training sequences and wall time at the eval (-1: an older record)
};
struct MetricsHistory {
  std::vector<TrainPoint> train;
  std::vector<EvalPoint> eval;
  int64_t torn_tail_bytes = 0;  // a partial last record (a run killed mid-write, not resumed since): left out
};
// RUN/metrics.jsonl's records. Anything malformed is an error naming the file and line, except a partial last record
// without its newline (its writer was killed; a resume cuts it), which is left out and counted.
MetricsHistory read_metrics_history(const std::string& run_dir);

}  // namespace joule::cost
