#include "tools/bench_train.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>

#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "collectives/communicator.h"
#include "collectives/reducer.h"
#include "launch/cpu_allocator.h"
#include "launch/cpu_isa.h"
#include "launch/device.h"
#include "launch/placement.h"
#include "launch/runtime.h"
#include "launch/torch_compat.h"
#include "models/bert.h"
#include "models/flops.h"
#include "tools/bench_model.h"
#include "tools/stats.h"
#include "trainer/optimizer.h"
#include "trainer/run_setup.h"
#include "trainer/train_step.h"

namespace joule::tools {
using Clock = std::chrono::steady_clock;

// Per encoder layer; b = micro-batch, s = sequence length, h = hidden, a = heads, i = intermediate. Bytes per
// element: fp32 | bf16 mixed precision (models/precision_ops.h: matmul inputs and attention probabilities bf16, the
// residual stream and LayerNorm inputs fp32):
//   the layer input (for Q, K, V)             b s h       4 | 2 (its bf16 copy)
//   Q, K, V (for the two attention matmuls)   3 b s h     4 | 2
//   softmax output + dropped probabilities    2 a s² b    4 | 2      and the dropout mask a s² b, 1 byte
//   context (for the output projection)       b s h       4 | 2
//   residual sum (LayerNorm input)            b s h       4 | 4      and the dropout mask b s h, 1 byte
//   LayerNorm output (for the intermediate)   b s h       4 | 2 (its bf16 copy)
//   intermediate pre-GELU and post-GELU       2 b s i     4 | 2
//   residual sum (LayerNorm input)            b s h       4 | 4      and the dropout mask b s h, 1 byte
// plus the embeddings' LayerNorm input/output and dropout (2 b s h fp32, mask b s h) and the masked-only MLM head
// (p = predictions): fp32 ~5 p h + 2 p v (logits, log-softmax); bf16 2 p h (gathered rows' copy), 2 p h (transform),
// 4 p h (GELU output's fp32 copy for LayerNorm), 2 p h (LayerNorm output's copy), 4 p v (fp32 log-softmax; the bf16
// logits are not kept).
double activation_bytes(const models::BertConfig& c, int64_t b, int64_t s, int64_t predictions,
                        models::Precision precision) {
  const double h = c.hidden_size, a = c.num_attention_heads, i = c.intermediate_size;
  const double bsh = static_cast<double>(b) * s * h, ass = a * s * s * b;
  const double p = static_cast<double>(b) * predictions;
  const double embeddings = 4 * 2 * bsh + bsh;
  if (precision == models::Precision::kBf16) {
    const double per_layer = 2 * (6 * bsh + 2 * ass + 2 * b * s * i) + 4 * 2 * bsh + 1 * (ass + 2 * bsh);
    return c.num_hidden_layers * per_layer + embeddings + 10 * p * h + 4 * p * c.vocab_size;
  }
  const double per_layer = 4 * (bsh * 8 + 2 * ass + 2 * b * s * i) + 1 * (ass + 2 * bsh);
  return c.num_hidden_layers * per_layer + embeddings + 4 * (5 * p * h + 2 * p * c.vocab_size);
}

// Resident bytes now (/proc/self/statm), for where the peak comes from.
double rss_now() {
  std::ifstream statm("/proc/self/statm");
  double size = 0, resident = 0;
  statm >> size >> resident;
  return resident * static_cast<double>(sysconf(_SC_PAGESIZE));
}

std::string bench_train(const TrainBenchOptions& o) {
  if (o.wire != "fp32" && o.wire != "bf16") throw UsageError("--wire is '" + o.wire + "'; valid: fp32, bf16");
  // The process and the objects that train, built as `joule train` builds them (trainer/run_setup.h).
  trainer::TrainOptions process_options;
  process_options.device = o.device;
  process_options.threads = o.threads;
  process_options.fp32_gemm = o.fp32_gemm;
  trainer::TrainingProcess process = trainer::start_training_process(process_options);
  collectives::Communicator* comm = process.comm.get();
  const auto& info = comm->info();
  const launch::DeviceChoice& device = process.device;
  const bool cuda = device.device.is_cuda();
  const int threads = process.threads;
  const models::PrecisionChoice precision = models::choose_precision(o.precision, cuda, launch::CpuIsa::current());
  if (info.rank == 0)
    std::fprintf(stderr, "joule bench train: device %s; %s\n%s", device.description.c_str(), precision.reason.c_str(),
                 cuda ? "" : ("gemm: " + process.gemm.line() + "\n").c_str());
  nlohmann::json rss = {{"startup", rss_now()}};

  trainer::TrainingSpec spec;  // LAMB as NVIDIA's recipe (the [optimizer] defaults), fresh weights
  spec.model = o.config;
  spec.precision = precision.precision;
  spec.fp32_gemm = process.gemm.choice.fp32;
  spec.device = device;
  spec.seed = o.seed;
  spec.log = &std::cerr;  // stdout carries the JSON line alone
  if (o.wire == "bf16") spec.reducer.compression = collectives::Compression::kBFloat16;
  if (o.shard != "none" && o.shard != "zero1") throw UsageError("--shard is '" + o.shard + "'; valid: none, zero1");
  spec.optimizer.shard = o.shard;
  spec.reducer.shard = o.shard == "zero1";
  trainer::TrainingObjects objects = trainer::build_training(spec, *comm);
  objects.reducer->broadcast_parameters(0);
  models::BertForPreTraining& model = objects.model;
  collectives::GradientReducer& reducer = *objects.reducer;
  trainer::Optimizer* optimizer = objects.optimizer.get();
  const models::PretrainingBatch batch =
      models::synthetic_batch(o.config, o.micro_batch, o.seq_len, o.max_predictions,
                              o.seed + static_cast<uint64_t>(info.rank))
          .to(device.device);  // once: the loader's host-to-device copy is not what this measures

  double matmul = 0;  // the Linear weights' elements
  const std::vector<std::string> linear = model->matmul_weight_names();
  for (const auto& [name, p] : model->hf_named_parameters())
    if (std::find(linear.begin(), linear.end(), name) != linear.end()) matmul += static_cast<double>(p.numel());
  rss["state"] = rss_now();
  // The step that trains (trainer/train_step.h), one micro-batch per step, with memory probes between its stages.
  trainer::TrainStep train_step(model, reducer, *optimizer, 1);
  trainer::StepOptions probes;
  probes.after_forward = [&] { rss["forward"] = rss_now(); };
  probes.after_backward = [&] { rss["backward"] = rss_now(); };
  std::vector<double> step_seconds, exposed;
  double loss = 0, comm_bytes = 0;
  std::unique_ptr<torch::autograd::profiler::RecordProfile> profiler;
  for (int it = 0; it < o.warmup + o.steps; ++it) {
    if (it == o.warmup && !o.profile.empty() && info.rank == 0)
      profiler = std::make_unique<torch::autograd::profiler::RecordProfile>(o.profile);
    const auto t0 = Clock::now();
    if (it == o.warmup && cuda) launch::compat::reset_cuda_peak(device.cuda_index());
    const trainer::StepResult r = train_step.run([&] { return batch; }, 1e-4, probes);
    launch::compat::synchronize(device.device);  // the step's queued GPU work is part of the step
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    rss["step"] = rss_now();
    if (it == o.warmup + o.steps - 1) {  // the last step's loss, read once: the steps themselves never wait for it
      const trainer::BatchSums sums = r.sums.read();
      loss = (sums.mlm_loss + sums.nsp_loss) / sums.batches;
    }
    comm_bytes = static_cast<double>(reducer.stats().bytes + reducer.stats().gather_bytes);
    if (it >= o.warmup) {
      step_seconds.push_back(dt);
      exposed.push_back(r.exposed_comm_seconds);
    }
  }
  profiler.reset();  // writes the trace
  // The slowest rank sets the pace: per-step times are the same on every rank (the all-reduce syncs them).
  const double step_s = median(step_seconds);
  const auto gemms = models::training_gemms(o.config, o.micro_batch, o.seq_len, o.micro_batch * o.max_predictions);
  const double gflop = models::total_flops(gemms) / 1e9;
  // Peak RSS of the training steps, before the roofline measurement allocates its own matrices.
  const launch::CpuCacheStats cache = launch::cpu_cache_stats();
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  comm->barrier();
  const double device_peak_bytes =
      cuda ? static_cast<double>(launch::compat::cuda_peak_allocated_bytes(device.cuda_index())) : 0;
  const double sgemm = measure_matmul_gflops(gemms, precision.precision, device.device, 0.15,
                                             process.gemm.choice.fp32);  // every rank at once, as in training

  constexpr size_t kPerRank = 3;
  std::vector<double> per_rank(static_cast<size_t>(info.world_size) * kPerRank, 0.0);
  per_rank[static_cast<size_t>(info.rank) * kPerRank] = static_cast<double>(ru.ru_maxrss) * 1024.0;
  per_rank[static_cast<size_t>(info.rank) * kPerRank + 1] = sgemm;
  per_rank[static_cast<size_t>(info.rank) * kPerRank + 2] = optimizer->state_bytes();
  collectives::sum_over_ranks(*comm, per_rank);
  if (info.rank != 0) return "";
  double peak_rss = 0, sgemm_mean = 0, moments_max = 0;
  for (size_t r = 0; r < static_cast<size_t>(info.world_size); ++r) {
    peak_rss = std::max(peak_rss, per_rank[r * kPerRank]);
    sgemm_mean += per_rank[r * kPerRank + 1] / info.world_size;
    moments_max = std::max(moments_max, per_rank[r * kPerRank + 2]);
  }
  const double params = static_cast<double>(models::parameter_counts(o.config).total());
  const double ranks = info.world_size;
  const bool bf16 = precision.precision == models::Precision::kBf16, zero1 = o.shard == "zero1";
  // The Linear weights: held in bf16 from fp32 master shards with zero1 and bf16 (collectives/reducer.h).
  const double bf16_held = zero1 && bf16 ? matmul : 0;
  // Weights (fp32, or bf16 + a 1/N fp32 master) and fp32 gradients (bucket buffers) on every rank; LAMB's two
  // moments on every rank or 1/N of them (zero1).
  const double state_bytes =
      4 * (params - bf16_held) + (2 + 4 / ranks) * bf16_held + 4 * params + (zero1 ? 8 * params / ranks : 8 * params);
  // bf16: each matmul's bf16 copy of its fp32 weight, kept from forward for backward's input gradient (2 bytes per
  // parameter; none for the weights already held in bf16).
  const double weight_copies = bf16 ? 2 * (params - bf16_held) : 0;
  const double act = activation_bytes(o.config, o.micro_batch, o.seq_len, o.max_predictions, precision.precision);
  nlohmann::json j = {{"impl", "joule"},
                      {"model", o.model_name},
                      {"precision", models::precision_name(precision.precision)},
                      {"wire", o.wire},
                      {"shard", o.shard},
                      {"optimizer_state_bytes_per_rank", moments_max},
                      {"ranks", info.world_size},
                      {"threads", threads},
                      {"micro_batch", o.micro_batch},
                      {"seq_len", o.seq_len},
                      {"step_s", step_s},
                      {"step_s_all", step_seconds},
                      {"seq_per_s", o.micro_batch * info.world_size / step_s},
                      {"exposed_comm_s", median(exposed)},
                      {"comm_bytes_per_rank_step", comm_bytes},
                      {"gflop_per_rank_step", gflop},
                      {"gflops_per_rank", gflop / step_s},
                      {"sgemm_gflops_per_rank", sgemm_mean},
                      {"roofline_fraction", gflop / step_s / sgemm_mean},
                      {"peak_rss_bytes", peak_rss},
                      {"rss_rank0_after", rss},
                      {"cpu_cache",
                       {{"hits", cache.hits},
                        {"misses", cache.misses},
                        {"mapped_bytes", cache.mapped_bytes},
                        {"cached_bytes", cache.cached_bytes},
                        {"released_bytes", cache.released_bytes}}},
                      {"params", params},
                      {"state_bytes", state_bytes},
                      {"weight_copy_bytes", weight_copies},
                      {"activation_bytes", act},
                      {"rss_over_expected", peak_rss / (state_bytes + weight_copies + act)},
                      {"device", device.description},
                      {"loss", loss}};
  // What the figures depend on besides joule: who others compare them with need it beside every repeat.
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  const launch::BlasInfo blas = launch::detect_blas();
  j["host"] = {{"cpu_isa", launch::CpuIsa::current().describe()},
               {"blas", blas.description},
               {"openblas_coretype", coretype ? coretype : ""},
               {"fp32_gemm_kernels", blas.core.empty() ? std::string() : launch::fp32_gemm_kernels(blas)},
               {"gemm", cuda ? nlohmann::json() : trainer::gemm_record(process.gemm)},
               {"libtorch", launch::torch_version()},
               {"precision_path", precision.reason}};
  if (cuda) {
    // On a GPU the state and activations live in device memory: the caching allocator's peak, not the RSS.
    j["peak_device_memory_bytes"] = device_peak_bytes;
    j["device_memory_over_expected"] = device_peak_bytes / (state_bytes + weight_copies + act);
  }
  // MFU: the step's GEMM FLOPs (models/flops.h) per second over the device's dense peak at this precision.
  if (o.peak_tflops > 0) j["mfu"] = gflop / step_s / (o.peak_tflops * 1e3);
  return j.dump();
}

}  // namespace joule::tools
