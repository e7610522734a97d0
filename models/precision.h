// Which arithmetic a run uses: fp32, or bf16 mixed precision (fp32 master weights and optimizer state; matmuls in
// bf16; softmax statistics, LayerNorm, losses and reductions in fp32). This header chooses; models/precision_ops.h
// applies the choice inside the model. Neither knows anything CPU-specific beyond the capability check below, so
// the CUDA device runs the same code.
#pragma once

#include <string>

#include "launch/cpu_isa.h"

namespace joule::models {

enum class Precision { kFp32, kBf16 };

const char* precision_name(Precision p);  // "fp32" | "bf16"

struct PrecisionChoice {
  Precision precision = Precision::kFp32;
  std::string reason;  // one line: what was asked, what was picked, and why
};

// `setting` is "auto", "fp32" or "bf16". auto picks bf16 on CUDA and on a CPU with AVX512-BF16 or AMX-BF16 (bf16
// matmuls in hardware), fp32 on any other CPU (oneDNN would emulate bf16, slower than fp32). An explicit bf16 on
// such a CPU is honoured and the reason says it is emulated. Unknown settings are a usage error naming the value.
PrecisionChoice choose_precision(const std::string& setting, bool cuda, const launch::CpuIsa& isa);

// The valid settings, for option help and errors, and the check RunConfig and choose_precision share.
inline const char* precision_settings() { return "auto, fp32, bf16"; }
inline bool is_precision_setting(const std::string& s) { return s == "auto" || s == "fp32" || s == "bf16"; }

}  // namespace joule::models
