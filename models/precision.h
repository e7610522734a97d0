// Which arithmetic a run uses: fp32, or bf16 mixed precision (fp32 master weights and optimizer state; matmuls in
// bf16; softmax statistics, LayerNorm, losses and reductions in fp32). This header chooses; models/precision_ops.h
// applies the choice inside the model. Neither knows anything CPU-specific beyond the capability check below, so
// the CUDA device runs the same code.
#pragma once

#include <string>
#include <vector>

#include "launch/cpu_isa.h"

namespace joule::models {

enum class Precision { kFp32, kBf16 };

const char* precision_name(Precision p);  // "fp32" | "bf16"

struct PrecisionChoice {
  Precision precision = Precision::kFp32;
  std::string reason;  // one line: what was asked, what was picked, and why
};

// train.precision and --precision: auto (chosen from the device), or fp32 or bf16 as set.
enum class PrecisionSetting { automatic, fp32, bf16 };
inline const std::vector<std::string> kPrecisionWords = {"auto", "fp32", "bf16"};  // PrecisionSetting's order

// auto picks bf16 on CUDA and on a CPU with AVX512-BF16 or AMX-BF16 (bf16 matmuls in hardware), fp32 on any other
// CPU (oneDNN would emulate bf16 with AVX-512, slower than fp32; without AVX-512 each bf16 GEMM is emulated in an fp32
// one). An explicit bf16 on such a CPU is honoured and the reason says which of the two it gets.
PrecisionChoice choose_precision(PrecisionSetting setting, bool cuda, const launch::CpuIsa& isa);

}  // namespace joule::models
