// `joule bench model`: forward+backward throughput of BertForPreTraining on this machine, and how
// close it comes to the sgemm rate this same process measures on the model's own GEMM shapes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <torch/types.h>

#include "launch/blas_core.h"
#include "models/bert_config.h"
#include "models/flops.h"
#include "models/precision.h"
#include "tools/bench_model_options.h"

namespace joule::tools {

using models::GemmShape;
using models::total_flops;
using models::training_gemms;

struct ModelBenchResult {
  int threads = 0;
  std::string precision;  // the one used
  std::string gemm;       // the GEMM paths, measured and chosen (launch::GemmPath::line)
  double step_s_median = 0;
  double seq_per_s = 0;
  double gflop_per_step = 0;  // GEMM FLOPs of one forward+backward step
  double gflops = 0;          // achieved: GEMM FLOPs / step time
  double sgemm_gflops = 0;    // measured matmul rate on the same shapes in the compute dtype, FLOP-weighted
  double sgemm_fraction = 0;
  double loss = 0;  // last step's loss, to show the step computed something finite
  std::string to_json() const;
  std::string to_text(const ModelBenchOptions& options) const;
};

// The matmul roofline (fp32 or bf16 GEMMs) on the given shapes and device: each shape's fastest call (at least 3
// calls, for at least `seconds_per_shape`), weighted by the FLOPs the step spends in it.
// fp32 on the CPU: the unbatched shapes (the Linear layers') through fp32_linear and the batched ones (attention)
// through fp32_batched_matmul, on `fp32_gemm`'s path, as the model runs them (models/fp32_gemm.h). `packed_bf16` (bf16
// inference on the CPU): the Linear shapes through bf16_linear on weights packed once and the batched ones (attention)
// through bf16_batched_matmul, as EncoderModel's inference runs them, so that the model is measured against the calls
// it makes, not against LibTorch's slower mm that re-packs the weight each call. bf16 on a CPU where joule's bf16 GEMMs
// do not run (models/bf16_linear.h bf16_gemms_available): emulated in fp32, as the model runs it
// (models/precision_ops.h emulated_bf16_matmul, emulated_bf16_heads_matmul).
double measure_matmul_gflops(const std::vector<GemmShape>& gemms,
                             models::Precision precision = models::Precision::kFp32,
                             const torch::Device& device = torch::kCPU, double seconds_per_shape = 0.15,
                             launch::Fp32Gemm fp32_gemm = launch::Fp32Gemm::kBlas, bool packed_bf16 = false);

ModelBenchResult bench_model(const ModelBenchOptions& options);

}  // namespace joule::tools
