// What `joule bench model` is asked (bench_model.h runs it): no LibTorch, so that the joule front reads a command line
// into it before it executes the engine (tools/cli/engine_args.h).
#pragma once

#include <cstdint>

#include "launch/blas_core.h"
#include "models/bert_config.h"
#include "models/precision.h"

namespace joule::tools {

struct ModelBenchOptions {
  models::BertConfig config;
  int64_t seq_len = 128;
  int64_t batch = 8;
  int64_t max_predictions = 20;
  int threads = 0;  // 0: every core this process may use
  int warmup = 2;
  int iterations = 6;
  uint64_t seed = 1;
  models::PrecisionSetting precision = models::PrecisionSetting::automatic;
  launch::Fp32GemmSetting fp32_gemm = launch::Fp32GemmSetting::automatic;
};

}  // namespace joule::tools
