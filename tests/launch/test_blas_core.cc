// Which fp32 GEMM kernels run, judged against the processor (launch/blas_core.h), on CPU flag sets given by name so
// the verdicts do not depend on the machine the tests run on.
#include <gtest/gtest.h>

#include "launch/blas_core.h"
#include "launch/process.h"

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

// The fp32 GEMM path from the judgement and the calibration alone: oneDNN only where the BLAS's kernels are below the
// processor and oneDNN agrees and is faster; as set, blas always and onednn only where it agrees.
TEST(BlasCore, Fp32GemmPathFollowsTheJudgementAgreementAndSpeed) {
  using joule::launch::choose_fp32_gemm, joule::launch::Fp32Gemm, joule::launch::Fp32GemmSetting,
      joule::launch::GemmRates;
  const CpuIsa avx512 = CpuIsa::parse("avx2,fma,avx512f,avx512_bf16");
  const auto haswell_on_zen5 = judge_blas_core("Haswell", avx512, "Haswell");
  const auto prescott_on_emr = judge_blas_core("Prescott", CpuIsa::parse("avx2,fma,avx512f,amx_bf16"), "");
  const auto skylakex = judge_blas_core("SkylakeX", avx512, "");
  GemmRates fast;  // Zen 5 as measured: oneDNN twice the pinned Haswell kernels, products equal to 2e-7
  fast.blas_fp32 = 100;
  fast.onednn_fp32 = 205;
  fast.onednn_fp32_difference = 2e-7;
  fast.onednn_isa = "avx512_core_bf16";

  auto c = choose_fp32_gemm(Fp32GemmSetting::automatic, haswell_on_zen5, fast);
  EXPECT_EQ(c.fp32, Fp32Gemm::kOnednn);
  EXPECT_NE(
      c.reason.find("OpenBLAS's Haswell kernels (AVX2+FMA) are below this AVX-512 CPU (OPENBLAS_CORETYPE=Haswell, "
                    "set by the environment); oneDNN is 2.0x as fast"),
      std::string::npos)
      << c.reason;
  EXPECT_NE(c.reason.find("agree with the BLAS's to 2.0e-07"), std::string::npos) << c.reason;
  EXPECT_EQ(choose_fp32_gemm(Fp32GemmSetting::automatic, prescott_on_emr, fast).fp32, Fp32Gemm::kOnednn);
  // Kernels that match the processor stay, however the timings come out.
  c = choose_fp32_gemm(Fp32GemmSetting::automatic, skylakex, fast);
  EXPECT_EQ(c.fp32, Fp32Gemm::kBlas);
  EXPECT_EQ(c.reason, "OpenBLAS's SkylakeX kernels match the processor");
  EXPECT_EQ(choose_fp32_gemm(Fp32GemmSetting::automatic, judge_blas_core("", avx512, ""), fast).fp32,
            Fp32Gemm::kBlas);  // MKL, say

  GemmRates wrong = fast;  // a kernel computing wrong products is never taken
  wrong.onednn_fp32_difference = 0.3;
  c = choose_fp32_gemm(Fp32GemmSetting::automatic, haswell_on_zen5, wrong);
  EXPECT_EQ(c.fp32, Fp32Gemm::kBlas);
  EXPECT_NE(c.reason.find("differ from its by 0.3"), std::string::npos) << c.reason;
  GemmRates slow = fast;  // not worth a second library
  slow.onednn_fp32 = 110;
  c = choose_fp32_gemm(Fp32GemmSetting::automatic, haswell_on_zen5, slow);
  EXPECT_EQ(c.fp32, Fp32Gemm::kBlas);
  EXPECT_NE(c.reason.find("but oneDNN is only 1.10x as fast"), std::string::npos) << c.reason;
  GemmRates none;  // built without oneDNN
  none.blas_fp32 = 100;
  EXPECT_EQ(choose_fp32_gemm(Fp32GemmSetting::automatic, haswell_on_zen5, none).fp32, Fp32Gemm::kBlas);

  EXPECT_EQ(choose_fp32_gemm(Fp32GemmSetting::blas, haswell_on_zen5, fast).fp32, Fp32Gemm::kBlas);
  EXPECT_EQ(choose_fp32_gemm(Fp32GemmSetting::onednn, skylakex, fast).fp32, Fp32Gemm::kOnednn);
  auto error_of = [&](Fp32GemmSetting setting, const GemmRates& r) -> std::string {
    try {
      choose_fp32_gemm(setting, skylakex, r);
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of(Fp32GemmSetting::onednn, wrong).find("oneDNN's fp32 products differ"), std::string::npos);
  EXPECT_NE(error_of(Fp32GemmSetting::onednn, none).find("built without oneDNN"), std::string::npos);

  // The start-up line: the path taken with its rate and share of peak, the one not taken, why, and the clock.
  const std::string line = joule::launch::gemm_line(choose_fp32_gemm(Fp32GemmSetting::automatic, haswell_on_zen5, fast),
                                                    fast, haswell_on_zen5, "", avx512, 4.0);
  EXPECT_EQ(line.rfind("fp32 oneDNN avx512_core_bf16 205 GFLOP/s/core (80 % of peak), not OpenBLAS Haswell kernels at "
                       "100 (39 %): OpenBLAS's Haswell kernels (AVX2+FMA) are below this AVX-512 CPU",
                       0),
            0u)
      << line;
  EXPECT_NE(line.find("; peaks at the measured 4.00 GHz"), std::string::npos) << line;
}

// OMP_WAIT_POLICY by default: inference spins between parallel regions unless its GEMMs run on OpenBLAS's own threads,
// which spinning OpenMP threads starve; training always sleeps (ranks and the communicator share the cores).
TEST(BlasCore, InferenceSpinsUnlessOpenBlasThreadsRunItsGemms) {
  EXPECT_STREQ(joule::launch::default_wait_policy(/*serving=*/true, /*gemms_on_openblas_threads=*/false), "ACTIVE");
  EXPECT_STREQ(joule::launch::default_wait_policy(true, true), "PASSIVE");
  EXPECT_STREQ(joule::launch::default_wait_policy(false, false), "PASSIVE");
  EXPECT_STREQ(joule::launch::default_wait_policy(false, true), "PASSIVE");
}
