// `joule bench infer`: inference throughput and latency of a BERT/LayoutLM classifier on this machine, per batch size,
// with the best throughput under a p99 latency bound, energy and cost per million inferences, and the fraction of the
// matmul rate this process measures on the same GEMM shapes and of the processor's peak for the precision.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/precision.h"

namespace joule::cost {
struct InstanceProfile;
}

namespace joule::tools {

struct InferBenchOptions {
  std::string model = "bert-base";  // a preset (configs/models) or a model directory
  std::string architecture;         // empty: the directory's, or a preset's default (models/encoder_model.h)
  int64_t labels = 0;               // 0: the directory's id2label (else 2)
  std::vector<int64_t> batches = {1, 2, 4, 8, 16};
  int64_t seq_len = 128;
  models::PrecisionSetting precision = models::PrecisionSetting::automatic;
  int threads = 0;       // 0: every core
  double seconds = 2.0;  // timed per batch size, after the warm-up calls
  int warmup = 2;
  double p99_ms = 0;  // 0: no bound
  std::string instance = "cpu-host";
  std::string region = "world";  // grid intensity for CO2 (configs/grid-intensity.toml)
  uint64_t seed = 1;
  std::string profile;  // "": none; else the timed calls as a Chrome trace (LibTorch's profiler); one batch size only
};

struct InferPoint {
  int64_t batch = 0, calls = 0;  // served: the server's largest batch, and the requests answered
  double inferences_per_s = 0, p50_ms = 0, p99_ms = 0;
  double joules_per_million = 0, usd_per_million = 0;  // IT energy (no PUE)
  double gflops = 0, roofline_fraction = 0;            // GEMM FLOPs / s, and over the measured matmul rate
  // Served only (`joule bench serve`): the offered rate, p90, the requests that failed, the server's mean batch.
  double offered_per_s = 0, p90_ms = 0, mean_batch = 0;
  int64_t errors = 0;
};

struct InferBenchResult {
  // "closed": batches of a fixed size back to back in one process (`joule bench infer`); "served": one-example
  // requests at Poisson arrivals through `joule serve` (`joule bench serve`), one point per offered rate.
  std::string load = "closed";
  bool served() const { return load == "served"; }
  std::string model, architecture, precision, precision_reason, energy_sources, instance, region, date;
  int threads = 0;
  int64_t seq_len = 0;
  double p99_bound_ms = 0;  // the bound `chosen` was picked under; 0: none
  double sgemm_gflops = 0;  // matmul rate on the forward's shapes (batch 8), FLOP-weighted
  // The processor's peak for the precision on the cores the threads can use: cores (SMT siblings once) x FLOP per
  // cycle of the detected hardware (not JOULE_CPU_ISA's narrowing: the GEMM libraries use what is there) x the
  // measured clock (launch/cpu_isa.h). 0 where unknown (the clock is not measured off x86-64): JSON null.
  double peak_gflops = 0;
  int peak_cores = 0;
  double usd_per_hour = 0, pue = 1, grid_g_per_kwh = 0;  // the instance profile's price and PUE, the region's grid
  // Sets instance, its price and PUE, region and its grid intensity (configs/grid-intensity.toml).
  void price(const cost::InstanceProfile& profile, const std::string& grid_region);
  double usd_per_million(double inferences_per_s) const { return usd_per_hour * (1e6 / inferences_per_s) / 3600.0; }
  std::vector<InferPoint> points;
  // The best throughput whose p99 meets the bound (any, without one), served: without errors; -1: none meets it.
  int chosen = -1;
  void choose();
  double peak_fraction(const InferPoint& p) const { return peak_gflops > 0 ? p.gflops / peak_gflops : 0; }
  double co2_kg_per_million(const InferPoint& p) const {
    return p.joules_per_million / 3.6e6 * pue * grid_g_per_kwh / 1e3;
  }
  std::string to_json() const;  // one line; `joule plan --inference --measured` and `joule report` read it back
  static InferBenchResult from_json(const std::string& text, const std::string& where);
  std::string to_text() const;
};

InferBenchResult bench_infer(const InferBenchOptions& options);

// An inference run's directory (`joule bench infer --out DIR`): DIR/inference.json (the result, as to_json), which
// `joule summary DIR`, `joule report DIR` and `joule plan --inference --measured DIR` read. Returns the file's path.
std::string write_inference_run(const InferBenchResult& result, const std::string& dir);
// DIR/inference.json's path where DIR is an inference run's directory, else empty.
std::string inference_run_file(const std::string& dir);

}  // namespace joule::tools
