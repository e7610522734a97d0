#include "tools/bench_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <map>
#include <stdexcept>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "launch/runtime.h"
#include "launch/torch_compat.h"
#include "launch/util/error.h"
#include "models/bert.h"
#include "models/bf16_linear.h"
#include "models/fp32_gemm.h"
#include "models/precision_ops.h"
#include "tools/stats.h"

namespace joule::tools {
namespace {

using Clock = std::chrono::steady_clock;

using launch::seconds_since;

}  // namespace

double measure_matmul_gflops(const std::vector<GemmShape>& gemms, models::Precision precision,
                             const torch::Device& device, double seconds_per_shape, launch::Fp32Gemm fp32_gemm,
                             bool packed_bf16) {
  // fp32 on the CPU: joule's own sgemm calls, as the model makes them (models/fp32_gemm.h).
  const bool joule_fp32 = precision == models::Precision::kFp32 && device.is_cpu() && models::sgemm_on(fp32_gemm);
  packed_bf16 =
      packed_bf16 && precision == models::Precision::kBf16 && device.is_cpu() && models::bf16_gemms_available();
  const auto dtype = torch::TensorOptions()
                         .dtype(precision == models::Precision::kBf16 ? torch::kBFloat16 : torch::kFloat)
                         .device(device);
  torch::NoGradGuard no_grad;
  // Time each distinct shape once, then weight by how many FLOPs the step spends in it.
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, double> seconds_per_call;
  double total_seconds = 0, flops = 0;
  for (const GemmShape& s : gemms) {
    auto key = std::make_tuple(s.batch, s.m, s.n, s.k);
    auto it = seconds_per_call.find(key);
    if (it == seconds_per_call.end()) {
      torch::Tensor a = torch::randn({s.batch, s.m, s.k}, dtype), b = torch::randn({s.batch, s.k, s.n}, dtype);
      torch::Tensor c = torch::empty({s.batch, s.m, s.n}, dtype);
      torch::Tensor a0 = a[0], b0 = b[0], c0 = c[0];
      const torch::Tensor b0_rows = s.batch == 1 && (joule_fp32 || packed_bf16)
                                        ? b0.t().contiguous()
                                        : torch::Tensor();  // a Linear weight: [n, k]
      models::PackedWeights packs;
      if (packed_bf16 && s.batch == 1) packs.add(b0_rows);
      // The attention's products as inference runs them: 4-D views, decided once, outside the timed calls.
      const torch::Tensor a4 = a.unsqueeze(0), b4 = b.unsqueeze(0), c4 = c.unsqueeze(0);
      const bool batched_onednn = packed_bf16 && s.batch > 1 && models::bf16_batched_matmul_applies(a4, b4);
      const bool emulated = models::emulates_bf16_gemm(a);
      auto run = [&] {
        if (emulated) {  // as the model runs a bf16 GEMM where joule's bf16 kernels do not: in fp32
          c = s.batch > 1 ? models::emulated_bf16_heads_matmul(a4, b4, fp32_gemm) : torch::Tensor();
          c = c.defined() ? c : models::emulated_bf16_matmul(a, b);
        } else if (s.batch == 1 && joule_fp32)
          c0 = models::fp32_linear(a0, b0_rows, torch::Tensor(), fp32_gemm);
        else if (joule_fp32)
          c = models::fp32_batched_matmul(a4, b4, fp32_gemm);
        else if (s.batch == 1 && packed_bf16)
          c0 = models::bf16_linear(a0, b0_rows, torch::Tensor(), models::Activation::kNone, &packs);
        else if (batched_onednn)
          models::bf16_batched_matmul(a4, b4, c4);
        else if (s.batch == 1)
          torch::mm_out(c0, a0, b0);
        else
          torch::bmm_out(c, a, b);
        launch::compat::synchronize(device);  // a GPU's call has finished when the clock stops
      };
      run();  // warm-up
      // The roofline is the best this process achieves: keep each shape's fastest call.
      double best = 1e30;
      int calls = 0;
      auto t0 = Clock::now();
      do {
        auto t = Clock::now();
        run();
        best = std::min(best, seconds_since(t));
        ++calls;
      } while (calls < 3 || seconds_since(t0) < seconds_per_shape);
      it = seconds_per_call.emplace(key, best).first;
    }
    total_seconds += it->second * s.count;
    flops += s.flops();
  }
  return flops / total_seconds / 1e9;
}

ModelBenchResult bench_model(const ModelBenchOptions& o) {
  if (o.seq_len > o.config.max_position_embeddings)
    throw joule::UsageError("--seq-len " + std::to_string(o.seq_len) + " exceeds the model's max_position_embeddings " +
                            std::to_string(o.config.max_position_embeddings));
  if (o.batch < 1 || o.iterations < 1 || o.warmup < 0) throw joule::UsageError("--batch and --iterations must be >= 1");
  ModelBenchResult r;
  r.threads = o.threads > 0 ? o.threads : launch::physical_cores();
  launch::set_threads(r.threads);
  const models::PrecisionChoice precision = models::choose_precision(o.precision, false, launch::CpuIsa::current());
  r.precision = models::precision_name(precision.precision);

  const launch::GemmPath gemm = launch::choose_gemm_path(o.fp32_gemm);
  r.gemm = gemm.line();
  models::BertForPreTraining model(o.config, o.seed);
  model->set_precision(precision.precision, gemm.choice.fp32);
  model->train();
  models::PretrainingBatch batch = models::synthetic_batch(o.config, o.batch, o.seq_len, o.max_predictions, o.seed);
  const int64_t predictions = (batch.masked_positions != 0).sum().item<int64_t>();
  models::ForwardOptions fwd;
  fwd.compute_accuracy = false;

  std::vector<double> step_seconds;
  for (int i = 0; i < o.warmup + o.iterations; ++i) {
    auto t0 = Clock::now();
    for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
    models::PretrainingOutput out = model->forward(batch, fwd);
    out.loss.backward();
    const double s = seconds_since(t0);
    r.loss = out.loss.item<double>();
    if (!std::isfinite(r.loss))
      throw joule::InternalError("bench model: the loss is not finite (" + std::to_string(r.loss) + ")");
    if (i >= o.warmup) step_seconds.push_back(s);
  }
  const std::vector<GemmShape> gemms = training_gemms(o.config, o.batch, o.seq_len, predictions);
  r.step_s_median = median(step_seconds);
  r.seq_per_s = o.batch / r.step_s_median;
  r.gflop_per_step = total_flops(gemms) / 1e9;
  r.gflops = r.gflop_per_step / r.step_s_median;
  r.sgemm_gflops = measure_matmul_gflops(gemms, precision.precision, torch::kCPU, 0.15, gemm.choice.fp32);
  r.sgemm_fraction = r.gflops / r.sgemm_gflops;
  return r;
}

std::string ModelBenchResult::to_json() const {
  nlohmann::json j = {{"threads", threads},
                      {"precision", precision},
                      {"step_s", step_s_median},
                      {"seq_per_s", seq_per_s},
                      {"gflop_per_step", gflop_per_step},
                      {"gflops", gflops},
                      {"sgemm_gflops", sgemm_gflops},
                      {"sgemm_fraction", sgemm_fraction},
                      {"loss", loss},
                      {"gemm", gemm}};
  return j.dump();
}

std::string ModelBenchResult::to_text(const ModelBenchOptions& o) const {
  char buf[1024];
  std::snprintf(
      buf, sizeof buf,
      "model: %lld layers, hidden %lld, %lld heads, vocab %lld | batch %lld x seq %lld, %d thread(s), %s\n"
      "forward+backward step (median of %d): %.3f s  ->  %.2f seq/s\n"
      "GEMM work per step: %.1f GFLOP  ->  achieved %.1f GFLOP/s\n"
      "matmul in the same dtype on the same shapes (this process): %.1f GFLOP/s  ->  fraction of that rate: %.2f\n",
      static_cast<long long>(o.config.num_hidden_layers), static_cast<long long>(o.config.hidden_size),
      static_cast<long long>(o.config.num_attention_heads), static_cast<long long>(o.config.vocab_size),
      static_cast<long long>(o.batch), static_cast<long long>(o.seq_len), threads, precision.c_str(), o.iterations,
      step_s_median, seq_per_s, gflop_per_step, gflops, sgemm_gflops, sgemm_fraction);
  return "gemm: " + gemm + "\n" + buf;
}

}  // namespace joule::tools
