#include "models/precision.h"

#include "launch/util/error.h"

namespace joule::models {

const char* precision_name(Precision p) { return p == Precision::kBf16 ? "bf16" : "fp32"; }

PrecisionChoice choose_precision(PrecisionSetting setting, bool cuda, const launch::CpuIsa& isa) {
  const std::string where = cuda ? "CUDA" : "this CPU (" + isa.describe() + ")";
  const bool native = cuda || isa.native_bf16();
  if (setting == PrecisionSetting::fp32) return {Precision::kFp32, "precision fp32 (as set)"};
  if (setting == PrecisionSetting::bf16) {
    if (native) return {Precision::kBf16, "precision bf16 (as set)"};
    // oneDNN 2.x emulates bf16 in its AVX-512 kernels and has none without AVX-512 (models/bf16_linear.h), where
    // joule emulates each bf16 GEMM in an fp32 one; a joule without oneDNN keeps its LibTorch's bf16 matmul.
    const bool in_fp32_gemms = JOULE_ONEDNN && !isa.avx512f;
    return {Precision::kBf16, "precision bf16 (as set), but " + where + " has neither AVX512-BF16 nor AMX-BF16: " +
                                  (in_fp32_gemms ? "bf16 matmuls are emulated in fp32 GEMMs (oneDNN has no bf16 "
                                                   "kernels without AVX-512), no faster than fp32"
                                                 : "bf16 matmuls are emulated and slower than fp32")};
  }
  if (native)
    return {Precision::kBf16, "precision auto -> bf16 mixed precision: " + where +
                                  (cuda ? " runs bf16 matmuls natively" : " has bf16 matmul instructions")};
  return {Precision::kFp32, "precision auto -> fp32: " + where + " has neither AVX512-BF16 nor AMX-BF16"};
}

}  // namespace joule::models
