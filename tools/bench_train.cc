#include "tools/bench_train.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

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
#include "launch/util/file_io.h"
#include "models/bert.h"
#include "models/flops.h"
#include "tools/bench_deadline.h"
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

namespace {

// The objects that train, built as `joule train` builds them (trainer/run_setup.h), and the batch every step reuses.
struct BenchSetup {
  trainer::TrainingProcess process;
  models::PrecisionChoice precision;
  trainer::TrainingStack objects;
  models::PretrainingBatch batch;
  double matmul_elements = 0;  // the Linear weights' elements
  double rss_at_startup = 0;   // resident bytes once the process is up, before the model
  bool cuda() const { return process.device.device.is_cuda(); }
};

BenchSetup set_up(const TrainBenchOptions& o) {
  if (o.wire != "fp32" && o.wire != "bf16") throw UsageError("--wire is '" + o.wire + "'; valid: fp32, bf16");
  BenchSetup b;
  trainer::TrainOptions process_options;
  process_options.device = o.device;
  process_options.threads = o.threads;
  process_options.fp32_gemm = o.fp32_gemm;
  process_options.collective_timeout_seconds = o.collective_timeout_seconds;
  b.process = trainer::start_training_process(process_options);
  b.rss_at_startup = rss_now();
  const launch::DeviceChoice& device = b.process.device;
  b.precision = models::choose_precision(o.precision, b.cuda(), launch::CpuIsa::current());
  if (b.process.comm->info().rank == 0)
    std::fprintf(stderr, "joule bench train: device %s; %s\n%s", device.description.c_str(), b.precision.reason.c_str(),
                 b.cuda() ? "" : ("gemm: " + b.process.gemm.line() + "\n").c_str());
  trainer::TrainingSpec spec;  // LAMB as NVIDIA's recipe (the [optimizer] defaults), fresh weights
  spec.model = o.config;
  spec.precision = b.precision.precision;
  spec.fp32_gemm = b.process.gemm.choice.fp32;
  spec.device = device;
  spec.seed = o.seed;
  spec.log = &std::cerr;  // stdout carries the JSON line alone
  if (o.wire == "bf16") spec.reducer.compression = collectives::Compression::kBFloat16;
  spec.optimizer.shard = o.shard;
  spec.reducer.shard = o.shard == trainer::OptimizerSharding::zero1;
  spec.reducer.timeout_seconds = o.collective_timeout_seconds;
  b.objects = trainer::build_training(spec, *b.process.comm);
  b.objects.reducer->broadcast_parameters(0);
  b.batch = models::synthetic_batch(o.config, o.micro_batch, o.seq_len, o.max_predictions,
                                    o.seed + static_cast<uint64_t>(b.process.comm->info().rank))
                .to(device.device);  // once: the loader's host-to-device copy is not what this measures
  const std::vector<std::string> linear = b.objects.model->matmul_weight_names();
  for (const auto& [name, p] : b.objects.model->hf_named_parameters())
    if (std::find(linear.begin(), linear.end(), name) != linear.end())
      b.matmul_elements += static_cast<double>(p.numel());
  return b;
}

// The timed steps: each one's seconds and exposed communication, the last one's loss, the bytes a step moves, and the
// resident memory after each stage of a step (rank 0's, for where the peak comes from).
struct StepTimes {
  std::vector<double> seconds, exposed;
  double loss = 0, comm_bytes = 0;
  nlohmann::json rss;
};

StepTimes run_steps(const TrainBenchOptions& o, BenchSetup& b) {
  StepTimes t;
  t.rss = {{"startup", b.rss_at_startup}, {"state", rss_now()}};
  const launch::DeviceChoice& device = b.process.device;
  collectives::GradientReducer& reducer = *b.objects.reducer;
  // The step that trains (trainer/train_step.h), one micro-batch per step, with memory probes between its stages.
  trainer::TrainStep train_step(b.objects.model, reducer, *b.objects.optimizer, *b.process.comm,
                                o.collective_timeout_seconds, 1);
  trainer::StepOptions probes;
  probes.after_forward = [&] { t.rss["forward"] = rss_now(); };
  probes.after_backward = [&] { t.rss["backward"] = rss_now(); };
  std::unique_ptr<torch::autograd::profiler::RecordProfile> profiler;
  std::ostringstream trace;  // written through the one writer (atomically; never onto a FIFO or a device)
  for (int it = 0; it < o.warmup + o.steps; ++it) {
    if (it == o.warmup && !o.profile.empty() && b.process.comm->info().rank == 0)
      profiler = std::make_unique<torch::autograd::profiler::RecordProfile>(trace);
    const auto t0 = Clock::now();
    if (it == o.warmup && b.cuda()) launch::compat::reset_cuda_peak(device.cuda_index());
    const trainer::StepResult r = train_step.run([&] { return b.batch; }, 1e-4, probes);
    launch::compat::synchronize(device.device);  // the step's queued GPU work is part of the step
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    t.rss["step"] = rss_now();
    if (it == o.warmup + o.steps - 1) {  // the last step's loss, read once: the steps themselves never wait for it
      const trainer::BatchSums sums = r.sums.read();
      t.loss = sums.training_loss();
    }
    t.comm_bytes = static_cast<double>(reducer.stats().bytes + reducer.stats().gather_bytes);
    if (it >= o.warmup) {
      t.seconds.push_back(dt);
      t.exposed.push_back(r.exposed_comm_seconds);
    }
  }
  if (profiler) {
    profiler.reset();  // completes the trace
    write_file_atomically(o.profile, trace.str());
  }
  return t;
}

// What each rank measured, gathered: the largest peak RSS, the mean matmul rate, the largest optimizer state.
struct AcrossRanks {
  double peak_rss_bytes = 0, matmul_gflops_mean = 0, optimizer_state_bytes_max = 0;
};

AcrossRanks gather_over_ranks(collectives::Communicator& comm, double timeout_seconds, double peak_rss_bytes,
                              double matmul_gflops, double optimizer_state_bytes) {
  const auto& info = comm.info();
  constexpr size_t kPerRank = 3;
  std::vector<double> per_rank(static_cast<size_t>(info.world_size) * kPerRank, 0.0);
  per_rank[static_cast<size_t>(info.rank) * kPerRank] = peak_rss_bytes;
  per_rank[static_cast<size_t>(info.rank) * kPerRank + 1] = matmul_gflops;
  per_rank[static_cast<size_t>(info.rank) * kPerRank + 2] = optimizer_state_bytes;
  collectives::sum_over_ranks(comm, per_rank, timeout_seconds, "the ranks' memory and GEMM figures");
  AcrossRanks a;
  for (size_t r = 0; r < static_cast<size_t>(info.world_size); ++r) {
    a.peak_rss_bytes = std::max(a.peak_rss_bytes, per_rank[r * kPerRank]);
    a.matmul_gflops_mean += per_rank[r * kPerRank + 1] / info.world_size;
    a.optimizer_state_bytes_max = std::max(a.optimizer_state_bytes_max, per_rank[r * kPerRank + 2]);
  }
  return a;
}

// The memory a rank should hold, counted from the model: parameters, their state and gradients, bf16 weight copies,
// and the activations backward keeps.
struct ExpectedMemory {
  double params = 0, state_bytes = 0, weight_copies = 0, activations = 0;
  double total() const { return state_bytes + weight_copies + activations; }
};

ExpectedMemory expected_memory(const TrainBenchOptions& o, models::Precision precision, double matmul_elements,
                               int world_size) {
  ExpectedMemory m;
  m.params = static_cast<double>(models::parameter_counts(o.config).total());
  const double ranks = world_size;
  const bool bf16 = precision == models::Precision::kBf16, zero1 = o.shard == trainer::OptimizerSharding::zero1;
  // The Linear weights: held in bf16 from fp32 master shards with zero1 and bf16 (collectives/reducer.h).
  const double bf16_held = zero1 && bf16 ? matmul_elements : 0;
  // Weights (fp32, or bf16 + a 1/N fp32 master) and fp32 gradients (bucket buffers) on every rank; LAMB's two
  // moments on every rank or 1/N of them (zero1).
  m.state_bytes = 4 * (m.params - bf16_held) + (2 + 4 / ranks) * bf16_held + 4 * m.params +
                  (zero1 ? 8 * m.params / ranks : 8 * m.params);
  // bf16: each matmul's bf16 copy of its fp32 weight, kept from forward for backward's input gradient (2 bytes per
  // parameter; none for the weights already held in bf16).
  m.weight_copies = bf16 ? 2 * (m.params - bf16_held) : 0;
  m.activations = activation_bytes(o.config, o.micro_batch, o.seq_len, o.max_predictions, precision);
  return m;
}

// What the figures depend on besides joule: who compares them with others needs it beside every repeat.
nlohmann::json host_record(const BenchSetup& b) {
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  const launch::BlasInfo blas = launch::detect_blas();
  return {{"cpu_isa", launch::CpuIsa::current().describe()},
          {"blas", blas.description},
          {"openblas_coretype", coretype ? coretype : ""},
          {"fp32_gemm_kernels", blas.core.empty() ? std::string() : launch::fp32_gemm_kernels(blas)},
          {"gemm", b.cuda() ? nlohmann::json() : trainer::gemm_record(b.process.gemm)},
          {"libtorch", launch::torch_version()},
          {"precision_path", b.precision.reason}};
}

}  // namespace

namespace {

std::string measure(const TrainBenchOptions& o) {
  BenchSetup b = set_up(o);
  collectives::Communicator& comm = *b.process.comm;
  const StepTimes t = run_steps(o, b);
  // The slowest rank sets the pace: per-step times are the same on every rank (the all-reduce syncs them).
  const double step_s = median(t.seconds);
  const auto gemms = models::training_gemms(o.config, o.micro_batch, o.seq_len, o.micro_batch * o.max_predictions);
  const double gflop = models::total_flops(gemms) / 1e9;
  // Peak RSS of the training steps, before the roofline measurement allocates its own matrices.
  const launch::CpuCacheStats cache = launch::cpu_cache_stats();
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  comm.barrier({collectives::ReduceOp::kSum, o.collective_timeout_seconds, "the end of the timed steps"});
  const int cuda_index = b.process.device.cuda_index();
  const double device_peak_bytes =
      b.cuda() ? static_cast<double>(launch::compat::cuda_peak_allocated_bytes(cuda_index)) : 0;
  const double matmul_gflops = measure_matmul_gflops(gemms, b.precision.precision, b.process.device.device, 0.15,
                                                     b.process.gemm.choice.fp32);  // every rank at once, as in training
  const AcrossRanks ranks =
      gather_over_ranks(comm, o.collective_timeout_seconds, static_cast<double>(ru.ru_maxrss) * 1024.0, matmul_gflops,
                        b.objects.optimizer->state_bytes());
  if (comm.info().rank != 0) return "";
  const ExpectedMemory expected = expected_memory(o, b.precision.precision, b.matmul_elements, comm.info().world_size);
  nlohmann::json j = {{"impl", "joule"},
                      {"model", o.model_name},
                      {"precision", models::precision_name(b.precision.precision)},
                      {"wire", o.wire},
                      {"shard", trainer::sharding_name(o.shard)},
                      {"optimizer_state_bytes_per_rank", ranks.optimizer_state_bytes_max},
                      {"ranks", comm.info().world_size},
                      {"threads", b.process.threads},
                      {"micro_batch", o.micro_batch},
                      {"seq_len", o.seq_len},
                      {"step_s", step_s},
                      {"step_s_all", t.seconds},
                      {"seq_per_s", o.micro_batch * comm.info().world_size / step_s},
                      {"exposed_comm_s", median(t.exposed)},
                      {"comm_bytes_per_rank_step", t.comm_bytes},
                      {"gflop_per_rank_step", gflop},
                      {"gflops_per_rank", gflop / step_s},
                      {"sgemm_gflops_per_rank", ranks.matmul_gflops_mean},
                      {"roofline_fraction", gflop / step_s / ranks.matmul_gflops_mean},
                      {"peak_rss_bytes", ranks.peak_rss_bytes},
                      {"rss_rank0_after", t.rss},
                      {"cpu_cache",
                       {{"hits", cache.hits},
                        {"misses", cache.misses},
                        {"mapped_bytes", cache.mapped_bytes},
                        {"cached_bytes", cache.cached_bytes},
                        {"released_bytes", cache.released_bytes}}},
                      {"params", expected.params},
                      {"state_bytes", expected.state_bytes},
                      {"weight_copy_bytes", expected.weight_copies},
                      {"activation_bytes", expected.activations},
                      {"rss_over_expected", ranks.peak_rss_bytes / expected.total()},
                      {"device", b.process.device.description},
                      {"loss", t.loss},
                      {"host", host_record(b)}};
  if (b.cuda()) {
    // On a GPU the state and activations live in device memory: the caching allocator's peak, not the RSS.
    j["peak_device_memory_bytes"] = device_peak_bytes;
    j["device_memory_over_expected"] = device_peak_bytes / expected.total();
  }
  // MFU: the step's GEMM FLOPs (models/flops.h) per second over the device's dense peak at this precision.
  if (o.peak_tflops > 0) j["mfu"] = gflop / step_s / (o.peak_tflops * 1e3);
  return j.dump();
}

}  // namespace

std::string bench_train(const TrainBenchOptions& o) {
  return naming_the_timeout_flag([&] { return measure(o); }, "its start or steps");
}

}  // namespace joule::tools
