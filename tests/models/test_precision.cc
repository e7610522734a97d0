// bf16 mixed precision: the choice (auto, the capability check, forced ISAs), the fused attention softmax against
// LibTorch's fp32 softmax, the fused residual step against its composition, dropout masks shared by both dtypes, and a
// dropout-on model whose bf16 gradients point the way fp32's do and repeat bit for bit at a fixed thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <tuple>

#include <torch/csrc/autograd/functions/accumulate_grad.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>

#include "launch/util/error.h"
#include "launch/util/options.h"
#include "models/attention_softmax.h"
#include "models/bert.h"
#include "models/bf16_linear.h"
#include "models/cpu_vector.h"
#include "models/dropout.h"
#include "models/fp32_gemm.h"
#include "models/gelu.h"
#include "models/precision.h"
#include "models/precision_ops.h"
#include "models/residual_norm.h"
#include "test_util.h"

using joule::launch::CpuIsa;
using joule::models::choose_precision;
using joule::models::Precision;
using joule::models::PrecisionSetting;

namespace {

// Whether this joule was built with oneDNN (JOULE_ONEDNN is defined only then).
#if JOULE_ONEDNN
constexpr bool kWithOnednn = true;
#else
constexpr bool kWithOnednn = false;
#endif

// joule's oneDNN bf16 kernels are tested where they run (models/bf16_linear.h bf16_gemms_available); the tests of
// packed weights need them.
#define SKIP_WITHOUT_BF16_GEMMS()                                                                               \
  if (!joule::models::bf16_gemms_available())                                                                   \
  GTEST_SKIP() << "joule's bf16 GEMMs do not run here (built without oneDNN, or oneDNN has no bf16 matmul for " \
               << CpuIsa::current().describe() << ")"

// Runs `body` on joule's oneDNN bf16 GEMMs where they run, then (on every host of a joule built with oneDNN) with
// each of them emulated in an fp32 GEMM (WithoutBf16GemmsForTesting), as on a CPU without oneDNN's bf16 kernels: the
// same bounds hold for both.
void for_each_bf16_gemm(const std::function<void()>& body) {
  for (const bool emulated : {false, true}) {
    if (emulated ? !kWithOnednn : !joule::models::bf16_gemms_available()) continue;
    SCOPED_TRACE(emulated ? "bf16 GEMMs emulated in fp32 ones" : "joule's oneDNN bf16 GEMMs");
    std::optional<joule::models::WithoutBf16GemmsForTesting> without;
    if (emulated) without.emplace();
    body();
  }
}

// While alive, the lane kernels run `lanes` wide (models/cpu_vector.h native_lanes), whatever the processor.
struct ForcedLanes {
  explicit ForcedLanes(int lanes) { joule::models::cpu::forced_lanes_for_testing() = lanes; }
  ~ForcedLanes() { joule::models::cpu::forced_lanes_for_testing() = 0; }
  ForcedLanes(const ForcedLanes&) = delete;
  ForcedLanes& operator=(const ForcedLanes&) = delete;
};

double cosine(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor x = a.flatten().to(torch::kFloat64), y = b.flatten().to(torch::kFloat64);
  return (x.dot(y) / (x.norm() * y.norm())).item<double>();
}

// The fp32 GEMM paths this joule calls itself (models/fp32_gemm.h): the BLAS's sgemm_ where the process has one, and
// oneDNN's where joule was built with it.
std::vector<joule::launch::Fp32Gemm> fp32_gemm_paths() {
  std::vector<joule::launch::Fp32Gemm> paths;
  if (joule::models::fp32_blas_sgemm_available()) paths.push_back(joule::launch::Fp32Gemm::kBlas);
#if JOULE_ONEDNN
  paths.push_back(joule::launch::Fp32Gemm::kOnednn);
#endif
  return paths;
}

}  // namespace

TEST(Precision, AutoPicksBf16OnlyWhereMatmulsRunInHardware) {
  const CpuIsa avx512 = CpuIsa::parse("avx2,fma,avx512f");
  const CpuIsa zen5 = CpuIsa::parse("avx2,fma,avx512f,avx512_bf16");
  const CpuIsa sapphire = CpuIsa::parse("avx2,fma,avx512f,amx_bf16");
  EXPECT_EQ(choose_precision(PrecisionSetting::automatic, false, avx512).precision, Precision::kFp32);
  EXPECT_NE(
      choose_precision(PrecisionSetting::automatic, false, avx512).reason.find("neither AVX512-BF16 nor AMX-BF16"),
      std::string::npos);
  EXPECT_EQ(choose_precision(PrecisionSetting::automatic, false, CpuIsa::parse("none")).precision, Precision::kFp32);
  EXPECT_EQ(choose_precision(PrecisionSetting::automatic, false, zen5).precision, Precision::kBf16);
  EXPECT_EQ(choose_precision(PrecisionSetting::automatic, false, sapphire).precision, Precision::kBf16);
  EXPECT_EQ(choose_precision(PrecisionSetting::automatic, true, CpuIsa::parse("none")).precision,
            Precision::kBf16);  // CUDA
  EXPECT_EQ(choose_precision(PrecisionSetting::fp32, false, zen5).precision, Precision::kFp32);
  // An explicit bf16 is honoured on any CPU, and says it is emulated where it is.
  const auto forced = choose_precision(PrecisionSetting::bf16, false, avx512);
  EXPECT_EQ(forced.precision, Precision::kBf16);
  EXPECT_NE(forced.reason.find("emulated"), std::string::npos) << forced.reason;
  const auto avx2_only = choose_precision(PrecisionSetting::bf16, false, CpuIsa::parse("avx2,fma"));
  EXPECT_EQ(avx2_only.precision, Precision::kBf16);
  // In fp32 GEMMs where joule has oneDNN (whose bf16 kernels need AVX-512); a joule without keeps LibTorch's.
  EXPECT_EQ(avx2_only.reason.find("emulated in fp32 GEMMs") != std::string::npos, kWithOnednn) << avx2_only.reason;
  EXPECT_NE(avx2_only.reason.find("emulated"), std::string::npos) << avx2_only.reason;
  // The settings are a closed set, parsed at the door (train.precision, --precision): fp16 is none of them.
  EXPECT_FALSE(joule::parse_choice<PrecisionSetting>("fp16", joule::models::kPrecisionWords));
  EXPECT_EQ(joule::parse_choice<PrecisionSetting>("auto", joule::models::kPrecisionWords), PrecisionSetting::automatic);
}

TEST(Precision, IsaListsParseAndNameUnknownWords) {
  EXPECT_EQ(CpuIsa::parse("none").describe(), "none");
  EXPECT_EQ(CpuIsa::parse("avx512f,avx512_bf16").describe(), "avx512f avx512_bf16");
  EXPECT_TRUE(CpuIsa::parse("amx_bf16").native_bf16());
  EXPECT_FALSE(CpuIsa::parse("avx2,fma,avx512f").native_bf16());
  try {
    CpuIsa::parse("avx2,sse9");
    FAIL() << "sse9 accepted";
  } catch (const joule::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'sse9'"), std::string::npos) << e.what();
  }
  // Detection never claims bf16 matmuls without 512-bit vectors or tiles.
  const CpuIsa here = CpuIsa::detect();
  if (here.avx512_bf16) {
    EXPECT_TRUE(here.avx512f);
  }
}

TEST(Precision, FusedSoftmaxMatchesFp32SoftmaxForwardAndBackward) {
  torch::manual_seed(5);
  // Rows of whole 16-lane chunks and a tail (37), of chunks alone (64), of a tail alone (5).
  for (const int64_t l : {37, 64, 5}) {
    SCOPED_TRACE("keys " + std::to_string(l));
    const int64_t b = 3, heads = 4, pad = std::min<int64_t>(7, l - 1);
    const double scale = 0.125;
    const torch::Tensor scores = (torch::randn({b, heads, l, l}) * 6).to(torch::kBFloat16);
    torch::Tensor mask = torch::zeros({b, 1, 1, l});
    mask[1].narrow(-1, l - pad, pad).fill_(std::numeric_limits<float>::lowest());  // row 1 pads its last keys
    const torch::Tensor upstream = torch::randn({b, heads, l, l}).to(torch::kBFloat16);

    const torch::Tensor s1 = scores.clone().set_requires_grad(true);
    const torch::Tensor p = joule::models::scaled_masked_softmax(s1, mask, scale);
    ASSERT_EQ(p.scalar_type(), torch::kBFloat16);
    (p.to(torch::kFloat) * upstream.to(torch::kFloat)).sum().backward();

    const torch::Tensor s2 = scores.to(torch::kFloat).set_requires_grad(true);
    const torch::Tensor want = torch::softmax(s2 * scale + mask, -1);
    (want * upstream.to(torch::kFloat)).sum().backward();

    // bf16 keeps 8 significant bits: probabilities to 2^-8 relative (plus a floor), gradients by direction.
    EXPECT_TRUE(torch::allclose(p.to(torch::kFloat), want, 8e-3, 1e-4));
    EXPECT_EQ(p[1].narrow(-1, l - pad, pad).abs().sum().item<double>(), 0.0);  // padded keys get no weight
    EXPECT_GT(cosine(s1.grad(), s2.grad()), 0.999);
    EXPECT_EQ(s1.grad().scalar_type(), torch::kBFloat16);
  }
}

// The softmax with its dropout in one pass per row is train_dropout(scaled_masked_softmax) to the bit, forward and
// backward, at odd sizes, with a mask per batch row or per query, in a DropoutRows scope and outside one, at one and
// two threads; the call after it draws what it draws after the composition (the fused call takes one call ordinal).
TEST(Precision, FusedSoftmaxDropoutIsTheCompositionBitForBit) {
  const int threads_before = torch::get_num_threads();
  for (const int threads : {1, 2})
    for (const int64_t l : {37, 64, 5})
      for (const bool per_query : {false, true})
        for (const bool scoped : {false, true})
          for (const double p : {0.1, 0.5}) {
            const std::string where = "threads " + std::to_string(threads) + ", keys " + std::to_string(l) +
                                      (per_query ? ", a mask per query" : "") + (scoped ? ", in a scope" : "") +
                                      ", p " + std::to_string(p);
            SCOPED_TRACE(where);
            torch::set_num_threads(threads);
            torch::manual_seed(11);
            const int64_t b = 3, heads = 2;
            const double scale = 0.125;
            const torch::Tensor scores = (torch::randn({b, heads, l, l}) * 6).to(torch::kBFloat16);
            torch::Tensor mask = torch::zeros({b, 1, per_query ? l : 1, l});
            mask[1]
                .narrow(-1, l - std::min<int64_t>(3, l - 1), std::min<int64_t>(3, l - 1))
                .fill_(std::numeric_limits<float>::lowest());
            const torch::Tensor upstream = torch::randn({b, heads, l, l}).to(torch::kBFloat16);
            const torch::Tensor next_input = torch::rand({b, 40}).to(torch::kBFloat16);
            auto run = [&](bool fused) {
              const torch::Tensor s = scores.clone().set_requires_grad(true);
              torch::manual_seed(77);
              std::optional<joule::models::DropoutRows> rows;
              if (scoped) rows.emplace(5, 1000);
              const torch::Tensor y =
                  fused ? joule::models::scaled_masked_softmax(s, mask, scale, p)
                        : joule::models::train_dropout(joule::models::scaled_masked_softmax(s, mask, scale), p);
              const torch::Tensor next = joule::models::train_dropout(next_input, 0.3);
              (y.to(torch::kFloat) * upstream.to(torch::kFloat)).sum().backward();
              return std::vector<torch::Tensor>{y.detach(), s.grad(), next};
            };
            const auto want = run(false), got = run(true);
            EXPECT_EQ(got[0].scalar_type(), torch::kBFloat16);
            EXPECT_TRUE(torch::equal(got[0], want[0])) << "forward";
            EXPECT_TRUE(torch::equal(got[1], want[1])) << "backward";
            EXPECT_TRUE(torch::equal(got[2], want[2])) << "the next dropout call";
            // Batch rows 0 and 2 mask no key: their zeros are the dropped elements.
            const torch::Tensor unmasked = want[0].index_select(0, torch::tensor({0, 2}));
            EXPECT_NEAR((unmasked == 0).to(torch::kFloat).mean().item<double>(), p, 0.1) << "the composition drops";
          }
  torch::set_num_threads(threads_before);
  // p = 0 is the softmax alone; p = 1 drops everything (LibTorch's dropout, as train_dropout).
  const torch::Tensor s = torch::randn({2, 2, 9, 9}).to(torch::kBFloat16), m = torch::zeros({2, 1, 1, 9});
  EXPECT_TRUE(torch::equal(joule::models::scaled_masked_softmax(s, m, 0.5, 0.0),
                           joule::models::scaled_masked_softmax(s, m, 0.5)));
  EXPECT_EQ(joule::models::scaled_masked_softmax(s, m, 0.5, 1.0).abs().sum().item<double>(), 0.0);
}

// The softmax kernel's lanes, 16 (the avx512f clone) or 8 (the others: GCC makes a compare of a vector wider than the
// instruction set's one scalar compare per lane): both give the bits of the scalar exp on every lane, at the edges of
// its range, on infinities and NaN (any NaN for a NaN), and the same lane maxima; the softmax gives the same bits at
// either width, forward and backward, rows with and without a tail.
TEST(Precision, LaneKernelsGiveTheScalarBitsOn16And8Lanes) {
  namespace cpu = joule::models::cpu;
  constexpr int L = cpu::kLanes;
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> x = {-inf, -1e30f, -100.0f, -87.31f, -87.3f, -87.29f, -50.5f, -1.0f, -0.0f, 0.0f, 1e-30f,
                          0.5f, 1.0f,   10.0f,   88.29f,  88.3f,  88.31f,  100.0f, inf,   nan,   -0.5f};
  torch::manual_seed(3);
  const torch::Tensor more = torch::rand({6 * L - static_cast<int64_t>(x.size()) % L}) * 200 - 100;
  x.insert(x.end(), more.data_ptr<float>(), more.data_ptr<float>() + more.numel());
  ASSERT_EQ(x.size() % L, 0u);
  const auto same = [](float a, float b) {
    uint32_t ua, ub;
    std::memcpy(&ua, &a, 4);
    std::memcpy(&ub, &b, 4);
    return (std::isnan(a) && std::isnan(b)) || ua == ub;
  };
  for (size_t j = 0; j < x.size(); j += L) {
    const cpu::Lanes<16>::F v = cpu::load_lanes<16>(x.data() + j);
    const cpu::Lanes<16>::F w = cpu::load_lanes<16>(x.data() + (j + L) % x.size());
    const cpu::Lanes<16>::F whole = cpu::exp_approx<16>(v), max_whole = cpu::lanes_max<16>(v, w);
    for (int l = 0; l < L; ++l) {
      SCOPED_TRACE("x = " + std::to_string(x[j + l]));
      const int h = l / 8;
      const cpu::Lanes<8>::F half = cpu::exp_approx<8>(cpu::load_lanes<8>(x.data() + j + 8 * h));
      const cpu::Lanes<8>::F max_half = cpu::lanes_max<8>(cpu::load_lanes<8>(x.data() + j + 8 * h),
                                                          cpu::load_lanes<8>(x.data() + (j + L) % x.size() + 8 * h));
      EXPECT_TRUE(same(whole[l], cpu::exp_approx(x[j + l]))) << whole[l] << " " << cpu::exp_approx(x[j + l]);
      EXPECT_TRUE(same(half[l % 8], whole[l])) << half[l % 8] << " " << whole[l];
      EXPECT_TRUE(same(max_half[l % 8], max_whole[l]));
      EXPECT_TRUE(same(max_whole[l], v[l] > w[l] ? v[l] : w[l]));
    }
  }
  EXPECT_EQ(cpu::exp_approx<8>(cpu::splat<8>(-88.0f))[0], 0.0f);  // masked keys get no weight
  EXPECT_FLOAT_EQ(cpu::exp_approx<8>(cpu::splat<8>(1.0f))[5], std::exp(1.0f));

  for (const int64_t keys : {128, 37, 5}) {
    torch::manual_seed(4);
    const torch::Tensor scores = (torch::randn({2, 3, keys, keys}) * 8).to(torch::kBFloat16);
    torch::Tensor mask = torch::zeros({2, 1, 1, keys});
    mask[1].narrow(-1, 0, keys / 2).fill_(std::numeric_limits<float>::lowest());
    std::vector<torch::Tensor> at[2];
    for (const int lanes : {16, 8}) {
      const ForcedLanes forced(lanes);
      const torch::Tensor s = scores.clone().set_requires_grad(true);
      const torch::Tensor p = joule::models::scaled_masked_softmax(s, mask, 0.125);
      p.to(torch::kFloat).pow(2).sum().backward();
      at[lanes == 8] = {p.detach(), s.grad()};
    }
    EXPECT_TRUE(torch::equal(at[0][0], at[1][0])) << keys << " keys: forward";
    EXPECT_TRUE(torch::equal(at[0][1], at[1][1])) << keys << " keys: backward";
  }
}

// The bf16 residual step in one pass (dropout, add, LayerNorm, cast) against the composition it replaces:
// train_dropout + LibTorch's add, layer_norm and cast, from the same generator state. Forward without and with
// autograd, and the four gradients through both outputs, on odd widths (rows starting at odd elements of the dropout
// stream), odd row counts, a one-element row, dropped elements and p = 0.
TEST(Precision, FusedDropoutAddLayerNormMatchesTheComposition) {
  for (const double p : {0.0, 0.1, 0.5}) {
    for (const auto& [rows, n] : {std::pair<int64_t, int64_t>{3, 768}, {37, 35}, {2, 1}, {65, 17}}) {
      // BERT's eps (1e-12); a row of one element has no spread (y = beta), which BERT's eps would amplify a rounding
      // error of LibTorch's variance into: 1e-5 there.
      const double eps = n == 1 ? 1e-5 : 1e-12;
      const std::string where = std::to_string(rows) + "x" + std::to_string(n) + " p=" + std::to_string(p);
      torch::manual_seed(9);
      const torch::Tensor a0 = (torch::randn({rows, n}) * 3).to(torch::kBFloat16), r0 = torch::randn({rows, n}) * 2 + 1;
      const torch::Tensor g0 = torch::rand({n}) + 0.5, b0 = torch::randn({n});
      const torch::Tensor wy = torch::randn({rows, n}), wyb = torch::randn({rows, n});
      auto leaf = [](const torch::Tensor& t) { return t.clone().set_requires_grad(true); };
      auto run = [&](bool fused, bool grad, std::vector<torch::Tensor>* grads) {
        const torch::Tensor a = leaf(a0), r = leaf(r0), g = leaf(g0), b = leaf(b0);
        torch::manual_seed(77);  // the same dropout stream for both
        torch::Tensor y, yb;
        {
          torch::AutoGradMode mode(grad);
          if (fused) {
            std::tie(y, yb) = joule::models::dropout_add_layer_norm_bf16(a, r, g, b, p, eps);
          } else {
            y = torch::layer_norm((p > 0 ? joule::models::train_dropout(a, p) : a) + r, {n}, g, b, eps);
            yb = y.to(torch::kBFloat16);
          }
        }
        if (grad) {
          ((y * wy).sum() + (yb.to(torch::kFloat) * wyb).sum()).backward();
          *grads = {a.grad(), r.grad(), g.grad(), b.grad()};
        }
        return std::make_pair(y.detach(), yb.detach());
      };
      std::vector<torch::Tensor> want_grads, got_grads, unused;
      const auto [want, want_b] = run(false, true, &want_grads);
      const auto [got, got_b] = run(true, true, &got_grads);
      const auto [plain, plain_b] = run(true, false, &unused);
      // One element per row: y = beta and every gradient but beta's is 0 in exact arithmetic; LibTorch's variance
      // leaves ~3e-5 of rounding there, compared as absolute.
      const double floor = n == 1 ? 1e-4 : 0.0;
      EXPECT_TRUE(torch::allclose(got, want, 1e-5, std::max(1e-5, floor))) << where << ": " << (got - want).abs().max();
      EXPECT_TRUE(torch::equal(got_b, got.to(torch::kBFloat16))) << where;  // the copy is y rounded, exactly
      EXPECT_TRUE(torch::equal(plain, got) && torch::equal(plain_b, got_b)) << where << ": without autograd";
      const char* names[] = {"d(a)", "d(residual)", "d(gamma)", "d(beta)"};
      for (size_t i = 0; i < 4; ++i) {
        const torch::Tensor w = want_grads[i].to(torch::kFloat), o = got_grads[i].to(torch::kFloat);
        // d(a) is rounded to bf16 twice (as train_dropout's backward does): a last-bit difference of its fp32 input
        // can move it by one bf16 step.
        const double tol = i == 0 ? 1e-2 : 1e-4;
        EXPECT_TRUE(torch::allclose(o, w, tol, std::max(floor, tol * o.abs().max().item<double>())))
            << where << " " << names[i] << ": " << (o - w).abs().max();
      }
      if (p > 0 && n > 1) {
        EXPECT_TRUE(torch::equal(got_grads[0] == 0, want_grads[0] == 0)) << where << ": the dropped elements";
      }
    }
  }
}

// Its gradients do not depend on the thread count (the gamma/beta sums run over fixed blocks of rows), and
// PrecisionOps takes it in bf16 with and without autograd.
TEST(Precision, FusedResidualStepRepeatsAtAnyThreadCount) {
  const torch::Tensor a0 = torch::randn({300, 96}).to(torch::kBFloat16), r0 = torch::randn({300, 96});
  torch::nn::LayerNorm norm(torch::nn::LayerNormOptions({96}).eps(1e-12));
  const joule::models::PrecisionOps bf16(Precision::kBf16);
  const int threads_before = torch::get_num_threads();
  auto grads = [&](int threads) {
    torch::set_num_threads(threads);
    norm->zero_grad();
    const torch::Tensor a = a0.clone().set_requires_grad(true);
    torch::manual_seed(5);
    const auto [y, yb] = bf16.add_layer_norm(a, r0, norm, 0.1);
    (y.sum() + yb.to(torch::kFloat).pow(2).sum()).backward();
    return std::vector<torch::Tensor>{a.grad(), norm->weight.grad().clone(), norm->bias.grad().clone()};
  };
  const auto one = grads(1), two = grads(2);
  torch::set_num_threads(threads_before);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(torch::equal(one[i], two[i])) << i;
  c10::InferenceMode inference;
  torch::manual_seed(5);
  const auto [y, yb] = bf16.add_layer_norm(a0, r0, norm, 0.0);
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(torch::equal(yb, y.to(torch::kBFloat16)));
}

TEST(Precision, DropoutDrawsTheSameMaskInBf16AsInFp32) {
  const torch::Tensor x = torch::rand({64, 1000}).add_(0.5);
  torch::manual_seed(9);
  const torch::Tensor a = joule::models::train_dropout(x, 0.1);
  torch::manual_seed(9);
  const torch::Tensor bx = x.to(torch::kBFloat16).set_requires_grad(true);
  const torch::Tensor b = joule::models::train_dropout(bx, 0.1);
  ASSERT_EQ(b.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(torch::equal(a == 0, b == 0));
  EXPECT_TRUE(torch::allclose(b.to(torch::kFloat), a, 8e-3, 0));
  b.to(torch::kFloat).sum().backward();
  EXPECT_TRUE(torch::equal(bx.grad() == 0, a == 0));
}

// A model with dropout on, trained mode, padding and unused prediction slots: bf16 gradients align with fp32's
// (cosine >= 0.99 per tensor) and a second bf16 pass reproduces the first bit for bit.
TEST(Precision, Bf16GradientsAlignWithFp32AndRepeatExactly) {
  const auto config = joule::test::small_bert(300, 128, 4, 512, 64, 0.1, 3);
  joule::models::BertForPreTraining model(config, 3);
  model->train();
  joule::models::PretrainingBatch batch = joule::models::synthetic_batch(config, 4, 64, 10, 17);
  batch.attention_mask[3].narrow(0, 50, 14).zero_();
  auto grads = [&](Precision p, double* loss) {
    model->set_precision(p);
    model->zero_grad();
    torch::manual_seed(21);  // the same dropout masks in every pass
    auto out = model->forward(batch);
    out.loss.backward();
    *loss = out.loss.item<double>();
    std::vector<std::pair<std::string, torch::Tensor>> g;
    for (const auto& [name, t] : model->hf_named_parameters()) g.emplace_back(name, t.grad().clone());
    return g;
  };
  double l32 = 0, l16 = 0, l16b = 0;
  const auto g32 = grads(Precision::kFp32, &l32);
  const auto g16 = grads(Precision::kBf16, &l16);
  const auto again = grads(Precision::kBf16, &l16b);
  EXPECT_LT(std::abs(l16 - l32) / l32, 1e-2) << l16 << " vs " << l32;
  EXPECT_EQ(l16, l16b);
  for (size_t i = 0; i < g32.size(); ++i) {
    const std::string& name = g32[i].first;
    EXPECT_TRUE(torch::equal(g16[i].second, again[i].second)) << name << " differs between two bf16 passes";
    if (name.find("attention.self.key.bias") != std::string::npos) continue;  // zero in exact arithmetic
    EXPECT_GE(cosine(g16[i].second, g32[i].second), 0.99) << name;
  }
}

// fp32 Linear layers on oneDNN's sgemm: the same products as LibTorch's linear (its BLAS) up to summation order, in
// the forward and in the three gradients, on odd sizes, a 3-d input, and without a bias.
// joule's fp32 Linear on each path against LibTorch's: the output and the three gradients at odd sizes, with and
// without a bias; the weight gradient becomes the .grad, a second backward adds into that same storage (twice the
// sum), and the parameter's accumulator runs its post hooks both times (the gradient reducer marks it ready there).
TEST(Precision, Fp32LinearMatchesLibTorchAndAddsItsWeightGradientIntoTheGrad) {
  const auto paths = fp32_gemm_paths();
  if (paths.empty()) GTEST_SKIP() << "no sgemm to call: no BLAS sgemm_ in this process and no oneDNN";
  torch::manual_seed(11);
  for (const auto gemm : paths) {
    for (const auto& [batch, in, out, bias] : std::vector<std::tuple<int64_t, int64_t, int64_t, bool>>{
             {3 * 37, 61, 129, true}, {1, 5, 3, false}, {1, 7, 2, true}, {2 * 128, 256, 1024, true}}) {
      SCOPED_TRACE(std::string(joule::launch::fp32_gemm_name(gemm)) + " " + std::to_string(batch) + "x" +
                   std::to_string(in) + "x" + std::to_string(out));
      const torch::Tensor x = torch::randn({batch % 2 ? batch : 2, batch % 2 ? 1 : batch / 2, in});
      const torch::Tensor w = torch::randn({out, in}) * 0.05, b = bias ? torch::randn({out}) : torch::Tensor();
      const torch::Tensor upstream = torch::randn({x.size(0), x.size(1), out});
      int hook_calls = 0;
      auto run = [&](bool joule_linear) {
        const torch::Tensor xs = x.clone().set_requires_grad(true), ws = w.clone().set_requires_grad(true);
        const torch::Tensor bs = bias ? b.clone().set_requires_grad(true) : torch::Tensor();
        const auto accumulator = torch::autograd::impl::grad_accumulator(ws);  // held, as the reducer holds them
        accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
            [&](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
              hook_calls += joule_linear;
              return outputs;
            }));
        EXPECT_TRUE(joule::models::fp32_linear_applies(xs, ws, bs, gemm));
        const torch::Tensor y =
            joule_linear ? joule::models::fp32_linear(xs, ws, bs, gemm) : torch::nn::functional::linear(xs, ws, bs);
        if (bias) {
          EXPECT_TRUE(torch::equal(bs.detach(), b)) << "the bias was written to";  // one row: no aliasing
        }
        (y * upstream).sum().backward(torch::Tensor(), /*retain_graph=*/true);
        std::vector<torch::Tensor> got{y.detach(), xs.grad().clone(), ws.grad().clone(),
                                       bias ? bs.grad().clone() : torch::zeros({1})};
        const void* storage = ws.grad().data_ptr();
        (y * upstream).sum().backward();
        EXPECT_EQ(ws.grad().data_ptr(), storage);
        got.push_back(ws.grad());
        return got;
      };
      const auto want = run(false), got = run(true);
      for (size_t i = 0; i < want.size(); ++i) {
        SCOPED_TRACE(i);
        ASSERT_EQ(got[i].sizes(), want[i].sizes());
        EXPECT_TRUE(torch::allclose(got[i], want[i], 1e-5, 1e-4)) << (got[i] - want[i]).abs().max().item<double>();
      }
      const double scale = got[2].abs().max().item<double>();
      EXPECT_TRUE(torch::allclose(got[4], 2 * got[2], 1e-5, 1e-5 * scale))
          << "the second backward added into the first: " << (got[4] - 2 * got[2]).abs().max().item<double>();
      EXPECT_EQ(hook_calls, 2);
    }
  }
}

// bf16 Linear layers from fp32 master weights: forward and the three gradients match LibTorch's composition (cast,
// linear, autograd's casts back) to bf16 rounding (the forward rounds once, after the fp32 bias), on odd sizes and
// without a bias. The weight gradient goes straight into an existing fp32 .grad (the gradient buckets' views): a second
// backward adds exactly as much again, and the parameter's accumulator still runs its post hooks (the gradient reducer
// marks the parameter ready there).
TEST(Precision, Bf16LinearAddsItsWeightGradientIntoTheFp32Grad) {
  for_each_bf16_gemm([&] {
    torch::manual_seed(12);
    const joule::models::PrecisionOps bf16(Precision::kBf16);
    for (const auto& [rows, in, out, bias] : std::vector<std::tuple<int64_t, int64_t, int64_t, bool>>{
             {3 * 37, 61, 129, true}, {1, 5, 3, false}, {2 * 128, 256, 1024, true}}) {
      SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(in) + "x" + std::to_string(out));
      const torch::Tensor x = torch::randn({rows, 1, in}).to(torch::kBFloat16);
      const torch::Tensor w = torch::randn({out, in}) * 0.05, b = bias ? torch::randn({out}) : torch::Tensor();
      const torch::Tensor upstream = torch::randn({rows, 1, out});
      const torch::Tensor xs = x.clone().set_requires_grad(true), ws = w.clone().set_requires_grad(true);
      const torch::Tensor bs = bias ? b.clone().set_requires_grad(true) : torch::Tensor();
      int hook_calls = 0;
      const auto accumulator = torch::autograd::impl::grad_accumulator(ws);  // held, as the reducer holds them
      accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
          [&](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
            ++hook_calls;
            return outputs;
          }));
      const torch::Tensor y = bf16.linear(xs, ws, bs);
      ASSERT_EQ(y.scalar_type(), torch::kBFloat16);
      (y.to(torch::kFloat) * upstream).sum().backward(torch::Tensor(), /*retain_graph=*/true);
      const torch::Tensor first = ws.grad().clone();  // no .grad before: the product became it
      // The composition it replaces.
      const torch::Tensor yr =
          torch::nn::functional::linear(x, w.to(torch::kBFloat16), bias ? b.to(torch::kBFloat16) : torch::Tensor());
      // The bias is added in fp32 inside the GEMM and y rounded once (the composition rounds the product and the sum):
      // within one bf16 step of the fp32 result, and no further from it than the composition. The gradients: those
      // of the fp32 layer on the same rounded operands and output gradient (LibTorch's own bf16 GEMMs would sum in
      // bf16 on a CPU without AVX-512), to bf16's precision.
      const torch::Tensor xr = x.to(torch::kFloat).set_requires_grad(true);
      const torch::Tensor wr = w.to(torch::kBFloat16).to(torch::kFloat).set_requires_grad(true);
      const torch::Tensor br = bias ? b.clone().set_requires_grad(true) : torch::Tensor();
      const torch::Tensor exact = torch::nn::functional::linear(xr, wr, br);
      (exact * upstream.to(torch::kBFloat16).to(torch::kFloat)).sum().backward();  // y's gradient is bf16
      const torch::Tensor err = (y.to(torch::kFloat) - exact).abs(), err_ref = (yr.to(torch::kFloat) - exact).abs();
      EXPECT_TRUE((err <= exact.abs() * (1.0 / 256) + 1e-6).all().item<bool>()) << err.max();
      EXPECT_LE(err.sum().item<double>(), err_ref.sum().item<double>() * 1.0001 + 1e-6);
      EXPECT_TRUE(torch::allclose(xs.grad().to(torch::kFloat), xr.grad().to(torch::kFloat), 1e-2, 1e-2));
      const double scale = wr.grad().abs().max().item<double>();
      EXPECT_TRUE(torch::allclose(first, wr.grad(), 1e-2, 1e-2 * scale)) << (first - wr.grad()).abs().max();
      if (bias) {
        EXPECT_TRUE(torch::allclose(bs.grad(), br.grad(), 1e-2, 1e-2 * br.grad().abs().max().item<double>()));
      }
      // Again, into the .grad that now exists: the same tensor, twice the sum, and the hook ran both times.
      const void* storage = ws.grad().data_ptr();
      (y.to(torch::kFloat) * upstream).sum().backward();
      EXPECT_EQ(ws.grad().data_ptr(), storage);
      EXPECT_TRUE(torch::allclose(ws.grad(), 2 * first, 1e-6, 1e-6 * scale)) << (ws.grad() - 2 * first).abs().max();
      EXPECT_EQ(hook_calls, 2);
    }
  });
}

// A weight ZeRO-1 holds in bf16 (its fp32 .grad a view into a gradient bucket) and the fp32 master it was rounded from
// give the same bf16 Linear, bit for bit: the output, x's and the bias's gradients, and the weight's fp32 gradient
// added into the .grad storage it had; emulated too, where the output is the fp32 product of the rounded operands plus
// the bias, rounded once.
TEST(Precision, Bf16LinearIsTheSameForAWeightHeldInFp32OrBf16) {
  torch::manual_seed(29);
  const joule::models::PrecisionOps bf16(Precision::kBf16);
  const int64_t rows = 3 * 37, in = 61, out = 129;
  const torch::Tensor x = torch::randn({rows, in}).to(torch::kBFloat16);
  const torch::Tensor w = torch::randn({out, in}) * 0.05, b = torch::randn({out}), upstream = torch::randn({rows, out});
  for_each_bf16_gemm([&] {
    struct Run {
      torch::Tensor y, dx, dw, db;
    };
    const auto run = [&](bool held_in_bf16) {
      const torch::Tensor bucket = torch::zeros({out * in + 7});
      const torch::Tensor ws = (held_in_bf16 ? w.to(torch::kBFloat16) : w.clone()).set_requires_grad(true);
      ws.mutable_grad() = bucket.narrow(0, 7, out * in).view({out, in});
      const torch::Tensor xs = x.clone().set_requires_grad(true), bs = b.clone().set_requires_grad(true);
      const torch::Tensor y = bf16.linear(xs, ws, bs);
      (y.to(torch::kFloat) * upstream).sum().backward();
      EXPECT_EQ(ws.grad().scalar_type(), torch::kFloat);
      EXPECT_EQ(ws.grad().data_ptr(), static_cast<void*>(bucket.data_ptr<float>() + 7));
      return Run{y.detach(), xs.grad(), ws.grad().clone(), bs.grad()};
    };
    const Run fp32_held = run(false), bf16_held = run(true);
    EXPECT_TRUE(torch::equal(fp32_held.y, bf16_held.y));
    EXPECT_TRUE(torch::equal(fp32_held.dx, bf16_held.dx));
    EXPECT_TRUE(torch::equal(fp32_held.dw, bf16_held.dw)) << (fp32_held.dw - bf16_held.dw).abs().max();
    EXPECT_TRUE(torch::equal(fp32_held.db, bf16_held.db));
    EXPECT_GT(fp32_held.dw.abs().max().item<double>(), 0.0);
    if (!joule::models::bf16_gemms_available()) {
      const torch::Tensor exact = torch::mm(x.to(torch::kFloat), w.to(torch::kBFloat16).to(torch::kFloat).t()) + b;
      EXPECT_TRUE(torch::equal(fp32_held.y, exact.to(torch::kBFloat16)));
    }
  });
}

// Under a ZeroGradientScope the first weight-gradient GEMM into a marked .grad stores its product (the marked memory
// is not read: filled with 7s here, none of them survive), later ones add, and a weight that also reaches its .grad
// through autograd's accumulator (as the tied MLM decoder weight does through the embedding) gets that added after:
// the gradients equal those of the same graph accumulated into zeros, at odd sizes, bit for bit.
TEST(Precision, ZeroGradientScopeStoresTheFirstWeightGradientAndAddsTheRest) {
  const auto check = [](const joule::models::PrecisionOps& ops) {
    torch::manual_seed(13);
    const auto dtype = ops.compute_dtype();
    const int64_t rows = 3 * 37, in = 61, out = 129;
    const torch::Tensor x = torch::randn({rows, in}).to(dtype), w = torch::randn({out, in}) * 0.05;
    const torch::Tensor other = torch::randn({out, in}), upstream = torch::randn({rows, out});
    // y1 = x W^T twice through the Linear, plus sum(W * other) through LibTorch's autograd.
    const auto gradient = [&](bool scoped) {
      const torch::Tensor ws = w.clone().set_requires_grad(true), xs = x.clone().set_requires_grad(true);
      ws.mutable_grad() = torch::full({out, in}, scoped ? 7.0f : 0.0f);  // the .grad held before backward
      std::optional<joule::models::ZeroGradientScope> scope;
      if (scoped) scope.emplace(std::vector<torch::Tensor>{ws.grad()});
      const torch::Tensor loss = (ops.linear(xs, ws, {}).to(torch::kFloat) * upstream).sum() +
                                 (ops.linear(xs, ws, {}).to(torch::kFloat) * upstream * 0.5).sum() + (ws * other).sum();
      loss.backward();
      return std::make_pair(ws.grad().clone(), xs.grad().clone());
    };
    const auto [w_plain, x_plain] = gradient(false);
    const auto [w_scoped, x_scoped] = gradient(true);
    EXPECT_TRUE(torch::equal(w_scoped, w_plain)) << (w_scoped - w_plain).abs().max();
    EXPECT_TRUE(torch::equal(x_scoped, x_plain));
    EXPECT_GT(w_plain.abs().max().item<double>(), 0.0);
    // The marks end with the scope: a later backward adds into the 7s.
    const auto once = [&](float held, bool scope_before) {
      const torch::Tensor ws = w.clone().set_requires_grad(true);
      ws.mutable_grad() = torch::full({out, in}, held);
      if (scope_before) joule::models::ZeroGradientScope scope({ws.grad()});
      (ops.linear(x, ws, {}).to(torch::kFloat) * upstream).sum().backward();
      return ws.grad().clone();
    };
    const torch::Tensor product = once(0.0f, false), after_scope = once(7.0f, true);
    EXPECT_TRUE(torch::allclose(after_scope - 7.0f, product, 0, 1e-5 * product.abs().max().item<double>()));
  };
  for_each_bf16_gemm([&] { check(joule::models::PrecisionOps(Precision::kBf16)); });
  for (const auto gemm : fp32_gemm_paths()) {
    SCOPED_TRACE(std::string("fp32 on ") + joule::launch::fp32_gemm_name(gemm));
    check(joule::models::PrecisionOps(Precision::kFp32, gemm));
  }
}

// Inference (autograd records nothing): one GEMM with the bias, fp32 or bf16-held, and GELU in oneDNN's epilogue,
// rounded once. Within one bf16 step of the fp32 result and no further from it than LibTorch's composition (which
// rounds the product, the sum and the activation each); the same with GELU off. A bf16-held bias under autograd gets
// a bf16 gradient.
// Inference's packed weights: the same products as the plain weight (the blocked layout changes where the weight
// sits, not the arithmetic), and a pack whose weight changed after packing is not used.
TEST(Precision, PackedWeightsGiveThePlainWeightsProductsUntilTheWeightChanges) {
  SKIP_WITHOUT_BF16_GEMMS();
  using joule::models::Activation;
  torch::manual_seed(17);
  torch::NoGradGuard no_grad;
  for (const auto& [rows, in, out] :
       std::vector<std::tuple<int64_t, int64_t, int64_t>>{{3 * 37, 64, 129}, {1, 5, 3}, {2 * 128, 256, 1024}}) {
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(in) + "x" + std::to_string(out));
    const torch::Tensor x = torch::randn({rows, in}).to(torch::kBFloat16);
    torch::Tensor w = (torch::randn({out, in}) * 0.2).to(torch::kBFloat16);
    const torch::Tensor b = torch::randn({out});
    joule::models::PackedWeights packed;
    ASSERT_TRUE(packed.add(w));
    EXPECT_FALSE(packed.add(torch::randn({out, in})));  // fp32: not packed
    ASSERT_NE(packed.find(w), nullptr);
    EXPECT_GE(packed.bytes(), static_cast<size_t>(w.numel() * 2));
    for (const Activation act : {Activation::kNone, Activation::kGelu}) {
      const torch::Tensor plain = joule::models::bf16_linear(x, w, b, act);
      const torch::Tensor fast = joule::models::bf16_linear(x, w, b, act, &packed);
      const torch::Tensor exact = torch::nn::functional::linear(x.to(torch::kFloat), w.to(torch::kFloat), b);
      const torch::Tensor gap = (fast.to(torch::kFloat) - plain.to(torch::kFloat)).abs();
      // One bf16 rounding apart at most (the same fp32 sums; only the summation order may differ between kernels).
      EXPECT_TRUE((gap <= plain.to(torch::kFloat).abs() * (1.0 / 128) + 1e-3).all().item<bool>()) << gap.max();
      if (act == Activation::kNone) {
        const torch::Tensor err = (fast.to(torch::kFloat) - exact).abs();
        EXPECT_TRUE((err <= exact.abs() * (1.0 / 256) + 1e-4).all().item<bool>()) << err.max();
      }
    }
    w.mul_(2);  // written in place: the pack is stale
    EXPECT_EQ(packed.find(w), nullptr);
    const torch::Tensor doubled = joule::models::bf16_linear(x, w, b, Activation::kNone, &packed);
    const torch::Tensor exact = torch::nn::functional::linear(x.to(torch::kFloat), w.to(torch::kFloat), b);
    EXPECT_TRUE(((doubled.to(torch::kFloat) - exact).abs() <= exact.abs() * (1.0 / 256) + 1e-4).all().item<bool>());
    ASSERT_TRUE(packed.add(w));
    w.set_data(torch::randn({out, in}).to(torch::kBFloat16));  // another storage: stale too
    EXPECT_EQ(packed.find(w), nullptr);
  }
}

// The attention's products on the per-head views of [B, L, hidden]: oneDNN's batched matmul on the strided views
// (no copies) gives LibTorch's products, and the context comes back as [B, L, hidden]. The same products, and the
// gradient while autograd records, where joule's bf16 GEMMs do not run (emulated in fp32: LibTorch 1.13's own bf16
// loops would sum in bf16 and miss the bound by far).
TEST(Precision, AttentionProductsOnStridedViewsMatchLibTorch) {
  torch::manual_seed(19);
  const int64_t batch = 3, len = 37, heads = 4, dh = 16;
  const joule::models::PrecisionOps bf16(Precision::kBf16);
  const auto heads_first = [&](const torch::Tensor& t) { return t.view({batch, len, heads, dh}).transpose(1, 2); };
  const torch::Tensor q = heads_first(torch::randn({batch, len, heads * dh}).to(torch::kBFloat16));
  const torch::Tensor k = heads_first(torch::randn({batch, len, heads * dh}).to(torch::kBFloat16));
  const torch::Tensor v = heads_first(torch::randn({batch, len, heads * dh}).to(torch::kBFloat16));
  const auto f = [](const torch::Tensor& t) { return t.to(torch::kFloat); };
  const auto within_bf16 = [](const torch::Tensor& got, const torch::Tensor& exact) {
    return ((got.to(torch::kFloat) - exact).abs() <= exact.abs() * (1.0 / 256) + 1e-3).all().item<bool>();
  };
  for (const bool withheld : {false, true}) {
    SCOPED_TRACE(withheld ? "without joule's bf16 GEMMs" : "as this CPU has them");
    std::optional<joule::models::WithoutBf16GemmsForTesting> without;
    if (withheld) without.emplace();
    torch::Tensor scores, context;
    {
      c10::InferenceMode inference;
      EXPECT_EQ(joule::models::bf16_batched_matmul_applies(q, k.transpose(-1, -2)),
                joule::models::bf16_gemms_available());
      scores = bf16.attention_scores(q, k);
      context = bf16.attention_context(torch::softmax(scores.to(torch::kFloat), -1).to(torch::kBFloat16), v);
    }
    ASSERT_EQ(scores.sizes(), (std::vector<int64_t>{batch, heads, len, len}));
    ASSERT_EQ(context.sizes(), (std::vector<int64_t>{batch, len, heads * dh}));
    EXPECT_TRUE(within_bf16(scores, torch::matmul(f(q), f(k).transpose(-1, -2))));
    const torch::Tensor probs = torch::softmax(f(scores), -1).to(torch::kBFloat16);
    const torch::Tensor exact_context = torch::matmul(f(probs), f(v)).transpose(1, 2).reshape({batch, len, heads * dh});
    EXPECT_TRUE(within_bf16(context, exact_context)) << (f(context) - exact_context).abs().max();
    // While autograd records: LibTorch's matmul, differentiable; d/dq of the scores' sum is the sum of the keys.
    const torch::Tensor qg = f(q).detach().to(torch::kBFloat16).set_requires_grad(true);
    EXPECT_FALSE(joule::models::bf16_batched_matmul_applies(qg, k.transpose(-1, -2)));
    bf16.attention_scores(qg, k).to(torch::kFloat).sum().backward();
    EXPECT_TRUE(within_bf16(qg.grad(), f(k).sum(2, /*keepdim=*/true).expand_as(qg)))
        << (f(qg.grad()) - f(k).sum(2, true)).abs().max();
  }
}

// fp32 attention products on the per-head views, sgemm by sgemm on the matrices where they lie, on each fp32 GEMM
// path this joule has: forward (scores heads first, the context heads last as [B, L, hidden]) and both gradients match
// LibTorch's matmul composition at odd sizes; a query of one position (the last layer of a classifier), a key with no
// unit stride (copied first) and a broadcast batch all take the same path.
TEST(Precision, Fp32AttentionProductsOnStridedViewsMatchLibTorchForwardAndBackward) {
  using joule::launch::Fp32Gemm;
  using joule::models::fp32_batched_matmul;
  using joule::models::HeadsOut;
  const auto paths = fp32_gemm_paths();
  if (paths.empty()) GTEST_SKIP() << "no sgemm to call: no BLAS sgemm_ in this process and no oneDNN";
  torch::manual_seed(23);
  const int64_t batch = 3, len = 37, heads = 4, dh = 16;
  const auto heads_first = [&](const torch::Tensor& t) {
    return t.view({t.size(0), t.size(1), heads, dh}).transpose(1, 2);
  };
  const torch::Tensor xq = torch::randn({batch, len, heads * dh}), xk = torch::randn({batch, len, heads * dh});
  const torch::Tensor xv = torch::randn({batch, len, heads * dh});
  for (const Fp32Gemm gemm : paths) {
    for (const char* form : {"per-head views", "one query", "strided keys", "broadcast batch"}) {
      SCOPED_TRACE(std::string(joule::launch::fp32_gemm_name(gemm)) + ", " + form);
      const std::string f = form;
      auto run = [&](bool joule_products) {
        torch::Tensor bq = xq.clone().set_requires_grad(true), bk = xk.clone().set_requires_grad(true);
        torch::Tensor bv = xv.clone().set_requires_grad(true);
        torch::Tensor q = heads_first(f == "one query" ? bq.narrow(1, 5, 1) : bq), k = heads_first(bk);
        torch::Tensor v = heads_first(bv);
        if (f == "strided keys") k = torch::cat({k, k}, 3).slice(3, 0, 2 * dh, 2);  // stride 2 along head_dim
        if (f == "broadcast batch") q = q.narrow(0, 0, 1).expand({batch, heads, len, dh});
        const torch::Tensor kt = k.transpose(-1, -2);
        torch::Tensor scores, context;
        if (joule_products) {
          EXPECT_TRUE(joule::models::fp32_batched_matmul_applies(q, kt, gemm));
          scores = fp32_batched_matmul(q, kt, gemm);
          context = fp32_batched_matmul(torch::softmax(scores, -1), v, gemm, HeadsOut::kHeadsLast)
                        .view({batch, q.size(2), heads * dh});
        } else {
          scores = torch::matmul(q, kt);
          context = torch::matmul(torch::softmax(scores, -1), v).transpose(1, 2).reshape({batch, q.size(2), -1});
        }
        torch::manual_seed(29);
        ((scores * torch::randn(scores.sizes())).sum() + (context * torch::randn(context.sizes())).sum()).backward();
        return std::vector<torch::Tensor>{scores.detach(), context.detach(), bq.grad(), bk.grad(), bv.grad()};
      };
      const auto want = run(false), got = run(true);
      for (size_t i = 0; i < want.size(); ++i) {
        SCOPED_TRACE(i);
        ASSERT_EQ(got[i].sizes(), want[i].sizes());
        EXPECT_TRUE(torch::allclose(got[i], want[i], 1e-5, 1e-4)) << (got[i] - want[i]).abs().max().item<double>();
      }
    }
    // PrecisionOps' fp32 attention takes this path; bf16 operands and 3-D ones do not.
    const joule::models::PrecisionOps fp32(Precision::kFp32, gemm);
    const torch::Tensor q = heads_first(xq), k = heads_first(xk);
    EXPECT_TRUE(torch::allclose(fp32.attention_scores(q, k), torch::matmul(q, k.transpose(-1, -2)), 1e-5, 1e-4));
    EXPECT_FALSE(joule::models::fp32_batched_matmul_applies(q.to(torch::kBFloat16), k.transpose(-1, -2), gemm));
    EXPECT_FALSE(joule::models::fp32_batched_matmul_applies(xq, xk.transpose(-1, -2), gemm));
    // An empty sum (head_dim 0) is zeros.
    EXPECT_TRUE(torch::equal(fp32_batched_matmul(torch::randn({2, 3, 4, 0}), torch::randn({2, 3, 0, 5}), gemm),
                             torch::zeros({2, 3, 4, 5})));
  }
}

TEST(Precision, Bf16LinearForInferenceFusesBiasAndGeluIntoTheGemm) {
  for_each_bf16_gemm([&] {
    using joule::models::Activation;
    torch::manual_seed(13);
    for (const auto& [rows, in, out] :
         std::vector<std::tuple<int64_t, int64_t, int64_t>>{{3 * 37, 61, 129}, {1, 5, 3}, {2 * 128, 256, 1024}}) {
      for (const bool bias_bf16 : {false, true}) {
        for (const Activation act : {Activation::kNone, Activation::kGelu}) {
          SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(in) + "x" + std::to_string(out) +
                       (bias_bf16 ? " bf16 bias" : " fp32 bias") + (act == Activation::kGelu ? " gelu" : ""));
          const torch::Tensor x = torch::randn({rows, 1, in}).to(torch::kBFloat16);
          const torch::Tensor w = (torch::randn({out, in}) * 0.2).to(torch::kBFloat16);
          const torch::Tensor b = bias_bf16 ? torch::randn({out}).to(torch::kBFloat16) : torch::randn({out});
          const auto activate = [&](const torch::Tensor& t) { return act == Activation::kGelu ? torch::gelu(t) : t; };
          torch::NoGradGuard no_grad;
          ASSERT_TRUE(joule::models::bf16_linear_applies(x, w, b));
          const torch::Tensor y = joule::models::bf16_linear(x, w, b, act);
          ASSERT_EQ(y.scalar_type(), torch::kBFloat16);
          ASSERT_EQ(y.sizes(), (std::vector<int64_t>{rows, 1, out}));
          const torch::Tensor composed =
              activate(torch::nn::functional::linear(x, w, b.to(torch::kBFloat16))).to(torch::kFloat);
          const torch::Tensor exact =
              activate(torch::nn::functional::linear(x.to(torch::kFloat), w.to(torch::kFloat), b.to(torch::kFloat)));
          const torch::Tensor err = (y.to(torch::kFloat) - exact).abs(), err_ref = (composed - exact).abs();
          EXPECT_TRUE((err <= exact.abs() * (1.0 / 256) + 1e-4).all().item<bool>()) << err.max();
          EXPECT_LE(err.sum().item<double>(), err_ref.sum().item<double>() * 1.0001 + 1e-6);
        }
      }
    }
    const torch::Tensor x = torch::randn({7, 9}).to(torch::kBFloat16).set_requires_grad(true);
    const torch::Tensor w = torch::randn({4, 9}).set_requires_grad(true);
    const torch::Tensor b = torch::randn({4}).to(torch::kBFloat16).set_requires_grad(true);
    joule::models::bf16_linear(x, w, b, Activation::kGelu).to(torch::kFloat).sum().backward();
    ASSERT_TRUE(b.grad().defined());
    EXPECT_EQ(b.grad().scalar_type(), torch::kBFloat16);
    const torch::Tensor xr = x.detach().to(torch::kFloat).set_requires_grad(true);
    const torch::Tensor wr = w.detach().to(torch::kBFloat16).to(torch::kFloat).set_requires_grad(true);
    const torch::Tensor br = b.detach().to(torch::kFloat).set_requires_grad(true);
    torch::gelu(torch::nn::functional::linear(xr, wr, br)).sum().backward();
    EXPECT_TRUE(torch::allclose(b.grad().to(torch::kFloat), br.grad(), 2e-2, 2e-2))
        << (b.grad() - br.grad()).abs().max();
    EXPECT_TRUE(torch::allclose(w.grad(), wr.grad(), 2e-2, 2e-2)) << (w.grad() - wr.grad()).abs().max();
  });
}

// joule's GELU pass: every bf16 input (in rows of 17) gives LibTorch's fp32 exact GELU of it rounded to bf16, up to
// one bf16 step where that GELU's own erf approximation lands on the other side of a rounding boundary (under 100
// inputs above -4.5), further only below -4.5 (where its absolute error of ~1e-7 exceeds a bf16 step of values under
// 2e-5); infinities and NaN as x Φ(x) has them; the tensor form, rows among the threads, the same values.
TEST(Precision, GeluPassIsTheExactGeluRounded) {
  std::vector<uint16_t> all;
  for (uint32_t bits = 0; bits < 65536; ++bits) all.push_back(static_cast<uint16_t>(bits));
  std::vector<uint16_t> out = all;
  for (size_t j = 0; j < out.size(); j += 17)
    joule::models::gelu_bf16_row(out.data() + j, static_cast<int64_t>(std::min<size_t>(17, out.size() - j)));
  const torch::Tensor x = torch::from_blob(all.data(), {65536}, torch::kInt16).view(torch::kBFloat16).to(torch::kFloat);
  const torch::Tensor y = torch::from_blob(out.data(), {65536}, torch::kInt16).view(torch::kBFloat16).to(torch::kFloat);
  const torch::Tensor reference = torch::gelu(x).to(torch::kBFloat16).to(torch::kFloat);
  const torch::Tensor finite = torch::isfinite(x);
  const torch::Tensor same = (y == reference) & finite;
  const torch::Tensor near = ((y - reference).abs() <= reference.abs() * (1.0 / 128)) & finite;
  const torch::Tensor far = ~near & finite;
  EXPECT_TRUE((x.masked_select(far) < -4.5).all().item<bool>()) << x.masked_select(far);  // values under 2e-5 there
  const torch::Tensor inside = finite & (x >= -4.5);
  EXPECT_GT((same & inside).sum().item<int64_t>(), inside.sum().item<int64_t>() - 100);
  for (size_t j = 0; j < all.size(); ++j) {
    const float xj = x[static_cast<int64_t>(j)].item<float>(), yj = y[static_cast<int64_t>(j)].item<float>();
    if (std::isnan(xj)) {
      EXPECT_TRUE(std::isnan(yj)) << j;
    } else if (std::isinf(xj)) {
      EXPECT_TRUE(xj > 0 ? yj == xj : (std::isnan(yj) || yj == 0.0f)) << xj << " -> " << yj;
    }
  }
  const torch::Tensor t = torch::randn({37, 50}).to(torch::kBFloat16);
  torch::Tensor u = t.clone();
  joule::models::gelu_bf16_(u);
  std::vector<uint16_t> rows(static_cast<const uint16_t*>(t.data_ptr()),
                             static_cast<const uint16_t*>(t.data_ptr()) + t.numel());
  for (int64_t r = 0; r < 37; ++r) joule::models::gelu_bf16_row(rows.data() + r * 50, 50);
  EXPECT_EQ(std::memcmp(rows.data(), u.data_ptr(), rows.size() * 2), 0);
}

// Training's GELU backward with the bias gradient in the same pass, against the composition it replaces (LibTorch's
// bf16 gelu_backward, then the column sums), at odd sizes and one and two threads: each gradient is dy GELU'(x) with
// the exact derivative rounded to fp32, rounded to bf16 once (within half a bf16 step of the exact product, and in
// sum closer to it than LibTorch's, whose fp32 Φ(x) + x φ(x) cancels near GELU's minimum); the sums are the gradient's
// columns added in fp32 rows in order, onto what the tensor held; the same bits at any thread count and with or without
// the sums. And bf16_linear's GELU in training: the table pass on the GEMM's output, its gradients those of the
// composition.
TEST(Precision, GeluBackwardWithTheBiasGradientMatchesTheComposition) {
  torch::manual_seed(17);
  const int threads = at::get_num_threads();
  for (const auto& [rows, n] :
       std::vector<std::pair<int64_t, int64_t>>{{37, 301}, {1, 1}, {5, 256}, {3, 513}, {2 * 128, 3 * 256}}) {
    SCOPED_TRACE(std::to_string(rows) + "x" + std::to_string(n));
    const torch::Tensor x = (torch::randn({rows, n}) * 3).to(torch::kBFloat16);
    const torch::Tensor dy = torch::randn({rows, n}).to(torch::kBFloat16);
    const torch::Tensor xd = x.to(torch::kDouble);
    const torch::Tensor derivative =
        (0.5 * torch::erfc(-xd / std::sqrt(2.0)) + xd * torch::exp(-0.5 * xd * xd) / std::sqrt(2 * M_PI))
            .to(torch::kFloat);
    const torch::Tensor exact = (dy.to(torch::kFloat) * derivative).to(torch::kBFloat16);
    const torch::Tensor composed = torch::gelu_backward(dy, x);
    std::vector<torch::Tensor> grads, sums;
    for (const int t : {1, 2}) {
      at::set_num_threads(t);
      torch::Tensor s = torch::ones({n});
      grads.push_back(joule::models::gelu_backward_bf16(dy, x, &s));
      sums.push_back(s);
      grads.push_back(joule::models::gelu_backward_bf16(dy, x, nullptr));
    }
    at::set_num_threads(threads);
    for (const torch::Tensor& g : grads) EXPECT_TRUE(torch::equal(g, grads[0]));
    EXPECT_TRUE(torch::equal(sums[1], sums[0]));
    const torch::Tensor g = grads[0].to(torch::kFloat);
    EXPECT_TRUE(torch::equal(grads[0], exact)) << (g - exact.to(torch::kFloat)).abs().max();
    const torch::Tensor truth = dy.to(torch::kDouble) * (0.5 * torch::erfc(-xd / std::sqrt(2.0)) +
                                                         xd * torch::exp(-0.5 * xd * xd) / std::sqrt(2 * M_PI));
    const torch::Tensor err = (g.to(torch::kDouble) - truth).abs();
    const torch::Tensor err_composed = (composed.to(torch::kDouble) - truth).abs();
    EXPECT_TRUE((err <= truth.abs() * (1.0 / 256) + 1e-38).all().item<bool>()) << err.max();
    EXPECT_LE(err.sum().item<double>(), err_composed.sum().item<double>());
    std::vector<float> in_order(static_cast<size_t>(n), 1.0f);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < n; ++j) in_order[static_cast<size_t>(j)] += g[r][j].item<float>();
    EXPECT_EQ(std::memcmp(in_order.data(), sums[0].data_ptr<float>(), in_order.size() * 4), 0);
  }
  EXPECT_THROW(joule::models::gelu_backward_bf16(torch::zeros({2, 3}, torch::kBFloat16),
                                                 torch::zeros({3, 2}, torch::kBFloat16), nullptr),
               c10::Error);
  torch::Tensor wrong = torch::zeros({2});
  EXPECT_THROW(joule::models::gelu_backward_bf16(torch::zeros({2, 3}, torch::kBFloat16),
                                                 torch::zeros({2, 3}, torch::kBFloat16), &wrong),
               c10::Error);
  // In bf16_linear's backward too.
  for_each_bf16_gemm([&] {
    using joule::models::Activation;
    for (const bool bias_bf16 : {false, true}) {
      SCOPED_TRACE(bias_bf16 ? "bf16 bias" : "fp32 bias");
      const torch::Tensor x = torch::randn({3, 37, 61}).to(torch::kBFloat16).set_requires_grad(true);
      const torch::Tensor w = (torch::randn({129, 61}) * 0.2).set_requires_grad(true);
      const torch::Tensor b =
          (bias_bf16 ? torch::randn({129}).to(torch::kBFloat16) : torch::randn({129})).set_requires_grad(true);
      const torch::Tensor up = torch::randn({3, 37, 129}).to(torch::kBFloat16);
      const torch::Tensor y = joule::models::bf16_linear(x, w, b, Activation::kGelu);
      (y.to(torch::kFloat) * up.to(torch::kFloat)).sum().backward();
      const torch::Tensor x0 = x.detach().clone().set_requires_grad(true);
      const torch::Tensor w0 = w.detach().clone().set_requires_grad(true);
      const torch::Tensor b0 = b.detach().clone().set_requires_grad(true);
      const torch::Tensor pre = joule::models::bf16_linear(x0, w0, b0, Activation::kNone);
      const torch::Tensor composed = torch::gelu(pre);
      (composed.to(torch::kFloat) * up.to(torch::kFloat)).sum().backward();
      const torch::Tensor table = pre.detach().clone();
      joule::models::gelu_bf16_(table);
      EXPECT_TRUE(torch::equal(y.detach(), table));
      EXPECT_EQ(b.grad().scalar_type(), b.scalar_type());
      for (const auto& [mine, theirs] : std::vector<std::pair<torch::Tensor, torch::Tensor>>{
               {x.grad(), x0.grad()}, {w.grad(), w0.grad()}, {b.grad(), b0.grad()}}) {
        // Each GELU gradient rounded to bf16 (the composition's bf16 GELU backward rounds its own way): within 1 % of
        // the gradient's scale.
        const torch::Tensor a = mine.to(torch::kFloat), r = theirs.to(torch::kFloat);
        EXPECT_LE((a - r).abs().max().item<double>(), 1e-2 * r.abs().max().item<double>()) << (a - r).abs().max();
        EXPECT_GT(cosine(a, r), 0.9999);
      }
    }
  });
}

// Inference's feed-forward block in chunks of the inner dimension: close to the fp32 block and no further from it than
// LibTorch's bf16 composition (GEMM, GELU, GEMM: three roundings, as the chunks have), for one chunk (an inner size
// the hidden size does not divide), two (one row too), four and eight; refused where the pair is not packed together or
// changed since.
TEST(Precision, FeedForwardInChunksMatchesTheComposition) {
  SKIP_WITHOUT_BF16_GEMMS();
  torch::manual_seed(23);
  torch::NoGradGuard no_grad;  // (weights made under InferenceMode would have no version to check a pack against)
  for (const auto& [rows, hidden, inner] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {3 * 37, 64, 256}, {5, 32, 100}, {2 * 128, 96, 768}, {1, 32, 64}, {7, 64, 128}}) {
    SCOPED_TRACE(std::to_string(rows) + " rows, " + std::to_string(hidden) + " -> " + std::to_string(inner));
    const torch::Tensor x = torch::randn({rows, 1, hidden}).to(torch::kBFloat16);
    torch::Tensor up = (torch::randn({inner, hidden}) * 0.2).to(torch::kBFloat16);
    const torch::Tensor down = (torch::randn({hidden, inner}) * 0.1).to(torch::kBFloat16);
    const torch::Tensor up_b = torch::randn({inner}).to(torch::kBFloat16),
                        down_b = torch::randn({hidden}).to(torch::kBFloat16);
    joule::models::PackedWeights packed;
    EXPECT_FALSE(packed.add_feed_forward(up, up.t().contiguous().narrow(1, 0, inner - 1).contiguous()));
    ASSERT_TRUE(packed.add_feed_forward(up, down));
    EXPECT_EQ(packed.size(), 2u);
    EXPECT_GE(packed.bytes(), static_cast<size_t>(2 * (up.numel() + down.numel())));
    ASSERT_NE(packed.find_feed_forward(up, down), nullptr);
    EXPECT_EQ(packed.find(up), nullptr);  // packed as a pair, not alone
    const torch::Tensor y = joule::models::bf16_feed_forward(x, up, up_b, down, down_b, packed);
    ASSERT_EQ(y.sizes(), x.sizes());
    ASSERT_EQ(y.scalar_type(), torch::kBFloat16);
    const auto f = [](const torch::Tensor& t) { return t.to(torch::kFloat); };
    namespace F = torch::nn::functional;
    const torch::Tensor exact = F::linear(torch::gelu(F::linear(f(x), f(up), f(up_b))), f(down), f(down_b));
    const torch::Tensor composed = f(F::linear(torch::gelu(F::linear(x, up, up_b)), down, down_b));
    const torch::Tensor err = (f(y) - exact).abs(), err_ref = (composed - exact).abs();
    // The roundings of the inner activations add up over the inner dimension as the composition's do.
    EXPECT_LE(err.max().item<double>(), err_ref.max().item<double>() * 1.5 + 1e-3) << err_ref.max();
    EXPECT_LE(err.mean().item<double>(), err_ref.mean().item<double>() * 1.1 + 1e-6) << err_ref.mean();
    EXPECT_LT(err.mean().item<double>(), exact.abs().mean().item<double>() * (1.0 / 128));
    torch::Tensor down_changed = down.clone();
    ASSERT_TRUE(packed.add_feed_forward(up, down_changed));
    down_changed.mul_(2);  // changed in place: no longer the packed pair
    EXPECT_EQ(packed.find_feed_forward(up, down_changed), nullptr);
    up.mul_(2);
    EXPECT_EQ(packed.find_feed_forward(up, down), nullptr);
    EXPECT_THROW(joule::models::bf16_feed_forward(x, up, up_b, down, down_b, packed), joule::InternalError);
  }
}
