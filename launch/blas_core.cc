#include "launch/blas_core.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <utility>

#include "launch/util/error.h"
#include "launch/util/format.h"

namespace joule::launch {
namespace {

const char* level_name(int level) {
  switch (level) {
    case 1:
      return "SSE";
    case 2:
      return "AVX";
    case 3:
      return "AVX2+FMA";
    case 4:
      return "AVX-512";
    default:
      return "unknown vectors";
  }
}

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

}  // namespace

int blas_core_level(const std::string& openblas_core) {
  // OpenBLAS's x86-64 DYNAMIC_ARCH cores (driver/others/dynamic.c) by the widest vectors their kernels use.
  static const std::pair<const char*, int> kCores[] = {
      {"katmai", 1},        {"coppermine", 1},  {"northwood", 1},    {"prescott", 1},   {"banias", 1},
      {"atom", 1},          {"core2", 1},       {"penryn", 1},       {"dunnington", 1}, {"nehalem", 1},
      {"athlon", 1},        {"opteron", 1},     {"opteron_sse3", 1}, {"barcelona", 1},  {"nano", 1},
      {"bobcat", 1},        {"sandybridge", 2}, {"bulldozer", 2},    {"piledriver", 2}, {"steamroller", 2},
      {"excavator", 2},     {"haswell", 3},     {"zen", 3},          {"skylakex", 4},   {"cooperlake", 4},
      {"sapphirerapids", 4}};
  const std::string name = lower(openblas_core);
  for (const auto& [core, level] : kCores)
    if (name == core) return level;
  return 0;
}

int cpu_vector_level(const CpuIsa& isa) {
  if (isa.avx512f) return 4;
  if (isa.avx2 && isa.fma) return 3;
  return 0;  // CpuIsa does not tell SSE from AVX; below AVX2 nothing is judged
}

BlasCoreJudgement judge_blas_core(const std::string& core, const CpuIsa& isa, const std::string& coretype_env) {
  BlasCoreJudgement j;
  if (core.empty()) return j;  // not OpenBLAS: nothing to judge
  j.core = core;
  j.core_level = blas_core_level(core);
  j.cpu_level = cpu_vector_level(isa);
  const std::string who = coretype_env.empty() ? "chosen by OpenBLAS from CPUID"
                                               : "OPENBLAS_CORETYPE=" + coretype_env + ", set by the environment";
  j.who = who;
  j.text = "OpenBLAS " + core + " kernels (" + level_name(j.core_level) + ")";
  if (j.core_level == 0 || j.cpu_level == 0) {
    j.text += ", " + who;
    return j;
  }
  j.below = j.core_level < j.cpu_level;
  j.text +=
      std::string(" on a CPU with ") + level_name(j.cpu_level) + (j.below ? ": below what it runs, " : ", ") + who;
  return j;
}

const char* fp32_gemm_name(Fp32Gemm g) { return g == Fp32Gemm::kOnednn ? "onednn" : "blas"; }

GemmChoice choose_fp32_gemm(Fp32GemmSetting setting, const BlasCoreJudgement& blas, const GemmRates& rates) {
  const bool available = rates.onednn_fp32 > 0;
  const bool agrees = onednn_fp32_usable(rates);  // asked only where oneDNN is available
  const std::string agreement =
      "its products agree with the BLAS's to " + format_number("%.1e", rates.onednn_fp32_difference);
  if (setting == Fp32GemmSetting::blas) return {Fp32Gemm::kBlas, "as set"};
  if (setting == Fp32GemmSetting::onednn) {
    if (!available)
      throw Error("train.fp32_gemm is \"onednn\", but this joule was built without oneDNN",
                  "set train.fp32_gemm to auto or blas, or build with libdnnl-dev (-DJOULE_ONEDNN=ON)",
                  ErrorKind::usage);
    if (!agrees)
      throw Error("train.fp32_gemm is \"onednn\", but oneDNN's fp32 products differ from the BLAS's by " +
                      format_number("%.2g", rates.onednn_fp32_difference) + " of their largest value on this processor",
                  "set train.fp32_gemm to blas (or auto)", ErrorKind::usage);
    return {Fp32Gemm::kOnednn, "as set; " + agreement};
  }
  if (!blas.below)
    return {Fp32Gemm::kBlas, blas.core.empty() ? "the BLAS is not OpenBLAS: not judged"
                                               : "OpenBLAS's " + blas.core + " kernels match the processor"};
  const std::string below = "OpenBLAS's " + blas.core + " kernels (" + level_name(blas.core_level) +
                            ") are below this " + level_name(blas.cpu_level) + " CPU (" + blas.who + ")";
  if (!available) return {Fp32Gemm::kBlas, below + ", and this joule has no oneDNN"};
  if (!agrees)
    return {Fp32Gemm::kBlas, below + ", but oneDNN's products differ from its by " +
                                 format_number("%.2g", rates.onednn_fp32_difference) + ": not used"};
  const double speedup = rates.blas_fp32 > 0 ? rates.onednn_fp32 / rates.blas_fp32 : 0;
  if (speedup < kOnednnSpeedup)
    return {Fp32Gemm::kBlas, below + ", but oneDNN is only " + format_number("%.2fx", speedup) + " as fast"};
  return {Fp32Gemm::kOnednn, below + "; oneDNN is " + format_number("%.1fx", speedup) + " as fast, and " + agreement};
}

std::string gemm_line(const GemmChoice& choice, const GemmRates& rates, const BlasCoreJudgement& blas,
                      const std::string& blas_description, const CpuIsa& isa, double clock_ghz) {
  auto rate = [&](double gflops, const char* dtype, bool first = true) {  // "205 GFLOP/s/core (84 % of peak)"
    std::string s = format_number(first ? "%.0f GFLOP/s/core" : "%.0f", gflops);
    const double peak = clock_ghz * cpu_flops_per_cycle(isa, dtype);
    if (peak > 0 && gflops > 0) s += format_number(first ? " (%.0f %% of peak)" : " (%.0f %%)", 100 * gflops / peak);
    return s;
  };
  const std::string blas_name = blas.core.empty() ? blas_description : "OpenBLAS " + blas.core + " kernels";
  const std::string onednn_name = rates.onednn_isa.empty() ? "oneDNN" : "oneDNN " + rates.onednn_isa;
  std::string line = "fp32 ";
  if (choice.fp32 == Fp32Gemm::kOnednn)
    line += onednn_name + " " + rate(rates.onednn_fp32, "fp32") + ", not " + blas_name + " at " +
            rate(rates.blas_fp32, "fp32", false);
  else
    line += blas_name + " " + rate(rates.blas_fp32, "fp32") +
            (rates.onednn_fp32 > 0 ? ", not " + onednn_name + " at " + rate(rates.onednn_fp32, "fp32", false) : "");
  line += ": " + choice.reason;
  if (rates.onednn_bf16 > 0) line += "; bf16 " + onednn_name + " " + rate(rates.onednn_bf16, "bf16");
  if (clock_ghz > 0) line += format_number("; peaks at the measured %.2f GHz", clock_ghz);
  return line;
}

}  // namespace joule::launch
