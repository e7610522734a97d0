// `joule bench infer`: inference throughput and latency of a BERT/LayoutLM classifier on this machine, per batch size,
// with the best throughput under a p99 latency bound, energy and cost per million inferences, and the fraction of the
// matmul rate this process measures on the same GEMM shapes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace joule::tools {

struct InferBenchOptions {
  std::string model = "bert-base";  // a preset (configs/models) or a model directory
  std::string architecture;         // empty: the directory's, or a preset's default (models/encoder_model.h)
  int64_t labels = 0;               // 0: the directory's id2label (else 2)
  std::vector<int64_t> batches = {1, 2, 4, 8, 16};
  int64_t seq_len = 128;
  std::string precision = "auto";
  int threads = 0;       // 0: every core
  double seconds = 2.0;  // timed per batch size, after the warm-up calls
  int warmup = 2;
  double p99_ms = 0;  // 0: no bound
  std::string instance = "cpu-host";
  uint64_t seed = 1;
};

struct InferPoint {
  int64_t batch = 0, calls = 0;
  double inferences_per_s = 0, p50_ms = 0, p99_ms = 0;
  double joules_per_million = 0, usd_per_million = 0;
  double gflops = 0, roofline_fraction = 0;  // GEMM FLOPs / s, and over the measured matmul rate
};

struct InferBenchResult {
  std::string model, architecture, precision, precision_reason, energy_sources, instance;
  int threads = 0;
  int64_t seq_len = 0;
  double sgemm_gflops = 0;  // matmul rate on the forward's shapes (batch 8), FLOP-weighted
  std::vector<InferPoint> points;
  int chosen = -1;  // the best throughput whose p99 meets the bound (any, without one); -1: none meets it
  std::string to_json() const;
  std::string to_text(const InferBenchOptions& options) const;
};

InferBenchResult bench_infer(const InferBenchOptions& options);

}  // namespace joule::tools
