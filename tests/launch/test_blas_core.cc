// Which fp32 GEMM kernels run, judged against the processor (launch/blas_core.h), on CPU flag sets given by name so
// the verdicts do not depend on the machine the tests run on.
#include <gtest/gtest.h>

#include "launch/blas_core.h"

using joule::launch::blas_core_level;
using joule::launch::CpuIsa;
using joule::launch::judge_blas_core;

TEST(BlasCore, KernelSetsAreJudgedAgainstTheProcessorsVectors) {
  const CpuIsa avx512 = CpuIsa::parse("avx2,fma,avx512f,avx512_bf16");  // Zen 4/5, Sapphire/Emerald Rapids
  const CpuIsa avx2 = CpuIsa::parse("avx2,fma");                        // Zen 2/3, Haswell..Comet Lake
  EXPECT_EQ(blas_core_level("Prescott"), 1);
  EXPECT_EQ(blas_core_level("SANDYBRIDGE"), 2);
  EXPECT_EQ(blas_core_level("Zen"), 3);
  EXPECT_EQ(blas_core_level("SapphireRapids"), 4);
  EXPECT_EQ(blas_core_level("Loongson3R5"), 0);

  // Emerald Rapids with Debian's 0.3.21: the SSE3 fallback, found by CPUID.
  auto j = judge_blas_core("Prescott", avx512, "");
  EXPECT_TRUE(j.below);
  EXPECT_EQ(j.text,
            "OpenBLAS Prescott kernels (SSE) on a CPU with AVX-512: below what it runs, chosen by OpenBLAS "
            "from CPUID");
  // Zen 5 with Haswell pinned by the environment: below, and said who chose it.
  j = judge_blas_core("Haswell", avx512, "Haswell");
  EXPECT_TRUE(j.below);
  EXPECT_NE(j.text.find("OPENBLAS_CORETYPE=Haswell, set by the environment"), std::string::npos) << j.text;
  // Matching kernels are not below.
  EXPECT_FALSE(judge_blas_core("SkylakeX", avx512, "").below);
  EXPECT_FALSE(judge_blas_core("Haswell", avx2, "").below);
  EXPECT_FALSE(judge_blas_core("Zen", avx2, "").below);
  EXPECT_TRUE(judge_blas_core("Nehalem", avx2, "").below);
  // Unknown core or a processor below AVX2: named, never judged.
  j = judge_blas_core("Loongson3R5", avx512, "");
  EXPECT_FALSE(j.below);
  EXPECT_EQ(j.text, "OpenBLAS Loongson3R5 kernels (unknown vectors), chosen by OpenBLAS from CPUID");
  EXPECT_FALSE(judge_blas_core("Prescott", CpuIsa::parse("none"), "").below);
  // Not OpenBLAS: nothing to say.
  EXPECT_TRUE(judge_blas_core("", avx512, "").text.empty());
}
