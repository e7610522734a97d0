#include "tools/bench_infer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <sstream>

#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "launch/cpu_isa.h"
#include "launch/runtime.h"
#include "launch/util/error.h"
#include "launch/util/file_io.h"
#include "launch/util/format.h"
#include "launch/util/json_field.h"
#include "models/encoder_model.h"
#include "models/flops.h"
#include "models/infer/infer.h"
#include "models/precision.h"
#include "tools/bench_model.h"
#include "tools/model_commands.h"
#include "tools/stats.h"
#include "trainer/cost/accounting.h"
#include "trainer/cost/energy.h"
#include "trainer/cost/hardware.h"

namespace joule::tools {
namespace {

using Clock = std::chrono::steady_clock;

using launch::seconds_since;

// A preset's default class: LayoutLM's token classifier (the study's form understanding), BERT's sequence classifier.
std::string default_architecture(const models::BertConfig& c) {
  return c.model_type == "layoutlm" ? "LayoutLMForTokenClassification" : "BertForSequenceClassification";
}

models::EncoderInput synthetic_input(const models::BertConfig& c, int64_t batch, int64_t len, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  models::EncoderInput in{torch::randint(5, c.vocab_size, {batch, len}, gen, i64),
                          torch::zeros({batch, len}, i64),
                          torch::ones({batch, len}, i64),
                          {},
                          {},
                          {}};
  in.input_ids.select(1, 0).fill_(2);
  if (c.model_type == "layoutlm") {
    torch::Tensor x0 = torch::randint(0, 900, {batch, len}, gen, i64),
                  y0 = torch::randint(0, 950, {batch, len}, gen, i64);
    in.bbox = torch::stack({x0, y0, x0 + 80, y0 + 40}, -1);
  }
  return in;
}

}  // namespace

InferBenchResult bench_infer(const InferBenchOptions& o) {
  if (o.batches.empty()) throw joule::UsageError("--batches needs at least one batch size");
  for (int64_t b : o.batches)
    if (b < 1 || b > 4096) throw joule::UsageError("--batches: " + std::to_string(b) + " is not in [1, 4096]");
  if (!(o.seconds > 0)) throw joule::UsageError("--seconds must be positive");
  if (!o.profile.empty() && o.batches.size() != 1)
    throw joule::UsageError("--profile traces one batch size's calls: give --batches a single size");
  std::error_code ec;
  const bool dir = std::filesystem::is_directory(o.model, ec);
  models::BertConfig config =
      dir ? models::BertConfig::from_json_file(o.model + "/config.json") : resolve_model_config(o.model);
  std::optional<models::EncoderModel> model;
  InferBenchResult r;
  r.model = o.model;
  if (dir) {
    model.emplace(models::load_encoder_model(o.model, o.architecture, o.labels).model);
  } else {
    const std::string a = o.architecture.empty() ? default_architecture(config) : o.architecture;
    model.emplace(config, models::architecture_named(a), o.labels > 0 ? o.labels : 2, o.seed);
  }
  r.architecture = model->architecture().name;
  if (o.seq_len < 2 || o.seq_len > config.max_position_embeddings)
    throw joule::UsageError("--seq-len " + std::to_string(o.seq_len) + " is not in [2, the model's positions " +
                            std::to_string(config.max_position_embeddings) + "]");
  r.seq_len = o.seq_len;
  r.threads = o.threads > 0 ? o.threads : launch::physical_cores();
  launch::set_threads(r.threads);
  const models::infer::InferencePrecision used = models::infer::use_precision(*model, o.precision);
  const models::PrecisionChoice& precision = used.choice;
  r.precision = models::precision_name(precision.precision);
  r.precision_reason = precision.reason;
  r.peak_cores = std::min(r.threads, launch::cores_behind_affinity());
  r.peak_gflops =
      r.peak_cores * launch::core_clock_ghz() * launch::cpu_flops_per_cycle(launch::CpuIsa::detect(), r.precision);

  cost::MeterContext meters;
  meters.apply_environment();
  meters.profile = cost::load_instance_profile(o.instance, config_dir() + "/hardware");
  r.price(meters.profile, o.region);
  r.p99_bound_ms = o.p99_ms;
  r.date = cost::utc_now_iso();
  cost::EnergyMonitor energy("auto", meters, 0.05);
  r.energy_sources = energy.sources();

  const bool per_token = model->architecture().head == models::Head::kToken;
  const int64_t labels = model->architecture().head == models::Head::kNone ? 0 : model->labels();
  // What `joule infer` runs: only what the logits need (models/encoder_model.h Outputs).
  const models::Outputs outputs = models::Outputs::kLogits;
  const bool first_only = model->first_position_only(outputs);
  const double gflop_per_inference =
      models::total_flops(models::inference_gemms(config, 1, o.seq_len, labels, per_token, first_only)) / 1e9;
  r.sgemm_gflops =
      measure_matmul_gflops(models::inference_gemms(config, 8, o.seq_len, labels, per_token, first_only),
                            precision.precision, torch::kCPU, 0.1, used.fp32_gemm, model->packed_weights() != nullptr);
  for (const int64_t batch : o.batches) {
    const models::EncoderInput in = synthetic_input(config, batch, o.seq_len, o.seed + static_cast<uint64_t>(batch));
    for (int i = 0; i < o.warmup; ++i) model->forward(in, outputs);
    std::vector<double> latency;
    std::unique_ptr<torch::autograd::profiler::RecordProfile> profiler;
    std::ostringstream trace;  // written through the one writer (atomically; never onto a FIFO or a device)
    if (!o.profile.empty()) profiler = std::make_unique<torch::autograd::profiler::RecordProfile>(trace);
    const double joules_before = energy.totals().total();
    const auto t0 = Clock::now();
    do {
      const auto t = Clock::now();
      model->forward(in, outputs);
      latency.push_back(seconds_since(t));
    } while (latency.size() < 3 || seconds_since(t0) < o.seconds);
    const double elapsed = seconds_since(t0);
    if (profiler) {
      profiler.reset();  // completes the trace
      write_file_atomically(o.profile, trace.str());
    }
    const double joules = energy.totals().total() - joules_before;
    InferPoint p;
    p.batch = batch;
    p.calls = static_cast<int64_t>(latency.size());
    const double inferences = static_cast<double>(batch) * static_cast<double>(p.calls);
    p.inferences_per_s = inferences / elapsed;
    p.p50_ms = percentile(latency, 0.50) * 1e3;
    p.p99_ms = percentile(latency, 0.99) * 1e3;
    p.joules_per_million = joules / inferences * 1e6;  // IT energy (no PUE)
    p.usd_per_million = r.usd_per_million(p.inferences_per_s);
    p.gflops = gflop_per_inference * p.inferences_per_s;
    p.roofline_fraction = r.sgemm_gflops > 0 ? p.gflops / r.sgemm_gflops : 0;
    r.points.push_back(p);
  }
  r.choose();
  return r;
}

}  // namespace joule::tools
