// `joule bench train`: the whole data-parallel training step as `joule train` runs it (forward and backward
// with dropout, bucketed all-reduce overlapped with backward, LAMB) on synthetic batches held in memory, under
// mpirun. Reports seq/s, the fraction of the sgemm roofline measured in the same processes, and each rank's
// peak RSS against params + grads + optimizer state + activations. The joule side of
// tools/bench/compare_pytorch.sh.
#pragma once

#include <cstdint>
#include <string>

#include "launch/blas_core.h"
#include "launch/device_kind.h"
#include "models/bert_config.h"
#include "models/precision.h"
#include "trainer/optimizer_options.h"
#include "trainer/train_options.h"

namespace joule::tools {

struct TrainBenchOptions {
  models::BertConfig config;
  std::string model_name;
  int64_t seq_len = 128;
  int64_t micro_batch = 8;  // per rank
  int64_t max_predictions = 20;
  int threads = 0;  // per rank; 0: cores / local ranks
  int warmup = 2;
  int steps = 5;
  uint64_t seed = 1;
  models::PrecisionSetting precision = models::PrecisionSetting::automatic;
  std::string wire = "fp32";  // the all-reduce's buffer dtype: fp32 | bf16 (gradients stay fp32 either side of it)
  std::string profile;        // "": none; else rank 0's timed steps as a Chrome trace (LibTorch's profiler)
  launch::DeviceKind device = launch::DeviceKind::cpu;  // cpu or cuda
  launch::Fp32GemmSetting fp32_gemm = launch::Fp32GemmSetting::automatic;
  trainer::OptimizerSharding shard = trainer::OptimizerSharding::none;  // optimizer.shard
  double peak_tflops = 0;  // the device's dense peak at the precision, for "mfu"; 0: not reported
  // Every wait for the other ranks fails after this long (a dead or stalled rank), as train.collective_timeout_seconds.
  double collective_timeout_seconds = trainer::TrainOptions{}.collective_timeout_seconds;
};

// Activation bytes autograd keeps for one micro-batch of BertForPreTraining in fp32 (what backward needs),
// counted tensor by tensor for this implementation: see the comment in bench_train.cc.
double activation_bytes(const models::BertConfig& config, int64_t micro_batch, int64_t seq_len, int64_t max_predictions,
                        models::Precision precision = models::Precision::kFp32);

// Runs on every rank (collective); returns rank 0's JSON line (other ranks: "").
std::string bench_train(const TrainBenchOptions& options);

}  // namespace joule::tools
