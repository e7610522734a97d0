// Sizing an inference fleet for a rate and a latency bound (`joule plan --inference`): per instance profile, the
// throughput one instance sustains within the bound, from a published figure (configs/hardware/inference/, scaled by
// the ratio of FLOPs per inference where the figure ran another model or sequence length) or from a `joule bench
// infer` measurement on this host; then how many instances serve the rate with a stated headroom, and what the fleet
// costs, uses and emits per million inferences. No LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/bert_config.h"
#include "trainer/cost/hardware.h"

namespace joule::sim {

struct InferenceWorkload {
  std::string model_name;  // a preset or a config.json, as the user named it
  models::BertConfig model;
  int64_t seq_len = 128;
  double rate_per_hour = 1e6;
  double p99_ms = 0;      // latency bound per batch call; 0: none
  double headroom = 0.2;  // spare capacity: the fleet can serve rate x (1 + headroom)
  double grid_g_per_kwh = 0;
};

// configs/hardware/inference under `config_dir`: the inference profiles, beside the training ones.
std::string inference_profile_dir(const std::string& config_dir);

// GEMM FLOPs of one inference of `model` at `seq_len` (the encoder: a classifier head adds under 0.1 %).
double inference_flops(const models::BertConfig& model, int64_t seq_len);

// A throughput an instance can be sized on, for the workload: published, scaled from a published figure, or measured.
struct InferenceRate {
  std::string basis;   // "published", "scaled by FLOPs x0.23 from bert-base seq 128", "measured on this host"
  std::string ran;     // what the figure ran: model as published, sequence length, batch, precision
  std::string source;  // public document, or the measurement's file
  std::string precision;
  int64_t batch = 0;
  double inferences_per_s = 0, p50_ms = 0, p95_ms = 0, p99_ms = 0;  // for the workload (scaled); 0: not known
  // The tail latency a bound is checked against: p99, else p95, else p50 (0: none); and which it is.
  double tail_ms() const { return p99_ms > 0 ? p99_ms : p95_ms > 0 ? p95_ms : p50_ms; }
  // The shortest a call of `batch` can last at this throughput (one stream): a lower bound on any latency.
  double min_call_ms() const { return 1e3 * static_cast<double>(batch) / inferences_per_s; }
  const char* tail_name() const { return p99_ms > 0 ? "p99" : p95_ms > 0 ? "p95" : "p50"; }
  // How close the figure's run is to the workload: 3 its sequence length and encoder shape (unscaled); 2 its length,
  // another encoder; 1 its encoder, another length; 0 neither (2 to 0 scaled by FLOPs)
  int match = 0;
};

// A published figure's rate for the workload: as published when it ran the workload's model and sequence length,
// else throughput divided and latency multiplied by the ratio of FLOPs per inference (`presets_dir`: the figure's
// model is a preset there).
InferenceRate rate_for(const cost::InferenceFigure& figure, const InferenceWorkload& w, const std::string& presets_dir);
// Every published figure of `profile` as a rate for the workload (rate_for each); a figure that cannot be (a model
// that is not a preset, a length beyond the model) is a ProfileError naming the profile's file.
std::vector<InferenceRate> published_rates(const cost::InstanceProfile& profile, const InferenceWorkload& w,
                                           const std::string& presets_dir);
// A measured rate (joule bench infer) of `measured` at `seq_len` with batch, throughput and latencies, scaled alike;
// `where` says where it was measured ("on this host").
InferenceRate measured_rate(const models::BertConfig& measured, const std::string& measured_name, int64_t seq_len,
                            InferenceRate rate, const InferenceWorkload& w, const std::string& where);

// Fleets beyond this many instances are not sized (a rate no published figure is meant for).
constexpr double kMaxInstances = 1e9;

struct FleetSizing {
  std::string instance, description;
  bool sized = false;  // false: no rate meets the bound (note says why)
  InferenceRate rate;  // the one sized on
  std::string note;    // a latency the bound was not checked against, or why none meets it
  int64_t instances = 0;
  double utilisation = 0;       // rate / (instances x throughput)
  double instance_power_w = 0;  // IT power of one instance at that utilisation
  double usd_per_hour = 0;      // the fleet's
  double usd_per_million = 0, kwh_per_million = 0, co2_kg_per_million = 0;  // energy with the profile's PUE
};

// Picks the rate to size on, the best throughput whose tail latency (p99, else p95, else p50, as published) meets the
// bound, preferring known latencies to unknown ones, then the closest run (`match`: unscaled, then the workload's
// length, then its encoder: sequence-length scaling is the least certain, attention grows with its square and
// compilers tile by it), then throughput; and sizes the fleet: ceil(rate x (1 + headroom) / throughput) instances,
// power at their utilisation.
FleetSizing size_fleet(const cost::InstanceProfile& profile, const std::vector<InferenceRate>& rates,
                       const InferenceWorkload& w);

}  // namespace joule::sim
