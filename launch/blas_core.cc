#include "launch/blas_core.h"

#include <algorithm>
#include <cctype>
#include <utility>

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
  j.core_level = blas_core_level(core);
  j.cpu_level = cpu_vector_level(isa);
  const std::string who = coretype_env.empty() ? "chosen by OpenBLAS from CPUID"
                                               : "OPENBLAS_CORETYPE=" + coretype_env + ", set by the environment";
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

}  // namespace joule::launch
