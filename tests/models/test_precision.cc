// bf16 mixed precision: the choice (auto, the capability check, forced ISAs), the fused attention softmax against
// LibTorch's fp32 softmax, dropout masks shared by both dtypes, and a dropout-on model whose bf16 gradients point
// the way fp32's do and repeat bit for bit at a fixed thread count.
#include <gtest/gtest.h>

#include <tuple>

#include "launch/util/error.h"
#include "models/attention_softmax.h"
#include "models/bert.h"
#include "models/dropout.h"
#include "models/precision.h"
#include "models/precision_ops.h"
#include "models/residual_norm.h"
#include "test_util.h"

using joule::launch::CpuIsa;
using joule::models::choose_precision;
using joule::models::Precision;

namespace {

double cosine(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor x = a.flatten().to(torch::kFloat64), y = b.flatten().to(torch::kFloat64);
  return (x.dot(y) / (x.norm() * y.norm())).item<double>();
}

}  // namespace

TEST(Precision, AutoPicksBf16OnlyWhereMatmulsRunInHardware) {
  const CpuIsa avx512 = CpuIsa::parse("avx2,fma,avx512f");
  const CpuIsa zen5 = CpuIsa::parse("avx2,fma,avx512f,avx512_bf16");
  const CpuIsa sapphire = CpuIsa::parse("avx2,fma,avx512f,amx_bf16");
  EXPECT_EQ(choose_precision("auto", false, avx512).precision, Precision::kFp32);
  EXPECT_NE(choose_precision("auto", false, avx512).reason.find("neither AVX512-BF16 nor AMX-BF16"), std::string::npos);
  EXPECT_EQ(choose_precision("auto", false, CpuIsa::parse("none")).precision, Precision::kFp32);
  EXPECT_EQ(choose_precision("auto", false, zen5).precision, Precision::kBf16);
  EXPECT_EQ(choose_precision("auto", false, sapphire).precision, Precision::kBf16);
  EXPECT_EQ(choose_precision("auto", true, CpuIsa::parse("none")).precision, Precision::kBf16);  // CUDA
  EXPECT_EQ(choose_precision("fp32", false, zen5).precision, Precision::kFp32);
  // An explicit bf16 is honoured on any CPU, and says it is emulated where it is.
  const auto forced = choose_precision("bf16", false, avx512);
  EXPECT_EQ(forced.precision, Precision::kBf16);
  EXPECT_NE(forced.reason.find("emulated"), std::string::npos) << forced.reason;
  try {
    choose_precision("fp16", false, zen5);
    FAIL() << "fp16 accepted";
  } catch (const joule::Error& e) {
    EXPECT_NE(std::string(e.what()).find("'fp16'"), std::string::npos) << e.what();
    EXPECT_EQ(e.exit_code(), 2);
  }
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
  const int64_t b = 3, heads = 4, l = 37;
  const double scale = 0.125;
  const torch::Tensor scores = (torch::randn({b, heads, l, l}) * 6).to(torch::kBFloat16);
  torch::Tensor mask = torch::zeros({b, 1, 1, l});
  mask[1].narrow(-1, 30, 7).fill_(std::numeric_limits<float>::lowest());  // row 1 pads its last 7 keys
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
  EXPECT_EQ(p[1].narrow(-1, 30, 7).abs().sum().item<double>(), 0.0);  // padded keys get no weight
  EXPECT_GT(cosine(s1.grad(), s2.grad()), 0.999);
  EXPECT_EQ(s1.grad().scalar_type(), torch::kBFloat16);
}

// The inference residual step in one pass against LibTorch's add + LayerNorm + cast, odd widths and rows included;
// PrecisionOps takes it only under InferenceMode in bf16 (training keeps LibTorch's ops, bit for bit).
TEST(Precision, FusedAddLayerNormMatchesTheComposition) {
  torch::manual_seed(9);
  // BERT's eps (1e-12); a row of one element has no spread (y = beta), which BERT's eps would amplify a rounding
  // error of LibTorch's variance into: 1e-5 there.
  for (const auto& [rows, n] : {std::pair<int64_t, int64_t>{3, 768}, {37, 35}, {2, 1}, {5, 17}}) {
    const double eps = n == 1 ? 1e-5 : 1e-12;
    const torch::Tensor a = (torch::randn({rows, n}) * 3).to(torch::kBFloat16), r = torch::randn({rows, n}) * 2 + 1;
    const torch::Tensor g = torch::rand({n}) + 0.5, b = torch::randn({n});
    const auto [y, yb] = joule::models::add_layer_norm_bf16(a, r, g, b, eps);
    const torch::Tensor want = torch::layer_norm(a.to(torch::kFloat) + r, {n}, g, b, eps);
    EXPECT_TRUE(torch::allclose(y, want, 1e-5, 1e-5)) << rows << "x" << n << ": " << (y - want).abs().max();
    EXPECT_TRUE(torch::equal(yb, y.to(torch::kBFloat16))) << rows << "x" << n;  // the copy is y rounded, exactly
  }
  // Through PrecisionOps: the one pass under InferenceMode in bf16, LibTorch's ops (and autograd) otherwise.
  torch::nn::LayerNorm norm(torch::nn::LayerNormOptions({24}).eps(1e-12));
  const torch::Tensor a = torch::randn({2, 5, 24}).to(torch::kBFloat16), r = torch::randn({2, 5, 24});
  const joule::models::PrecisionOps bf16(Precision::kBf16);
  const auto [slow, slow_b] = bf16.add_layer_norm(a, r, norm);
  EXPECT_EQ(slow_b.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(slow.requires_grad());  // the composition, with its graph
  c10::InferenceMode inference;
  const auto [fast, fast_b] = bf16.add_layer_norm(a, r, norm);
  EXPECT_TRUE(torch::allclose(fast, slow.detach(), 1e-5, 1e-5));
  EXPECT_TRUE(torch::equal(fast_b, fast.to(torch::kBFloat16)));
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
TEST(Precision, OnednnLinearMatchesLibTorchLinearForwardAndGrads) {
#if !JOULE_ONEDNN
  GTEST_SKIP() << "built without oneDNN (JOULE_ONEDNN=OFF)";
#endif
  torch::manual_seed(11);
  for (const auto& [batch, in, out, bias] : std::vector<std::tuple<int64_t, int64_t, int64_t, bool>>{
           {3 * 37, 61, 129, true}, {1, 5, 3, false}, {1, 7, 2, true}, {2 * 128, 256, 1024, true}}) {
    SCOPED_TRACE(std::to_string(batch) + "x" + std::to_string(in) + "x" + std::to_string(out));
    const torch::Tensor x = torch::randn({batch % 2 ? batch : 2, batch % 2 ? 1 : batch / 2, in});
    const torch::Tensor w = torch::randn({out, in}) * 0.05, b = bias ? torch::randn({out}) : torch::Tensor();
    const torch::Tensor upstream = torch::randn({x.size(0), x.size(1), out});
    auto run = [&](bool onednn) {
      const torch::Tensor xs = x.clone().set_requires_grad(true), ws = w.clone().set_requires_grad(true);
      const torch::Tensor bs = bias ? b.clone().set_requires_grad(true) : torch::Tensor();
      const torch::Tensor y =
          onednn ? joule::models::onednn_linear(xs, ws, bs) : torch::nn::functional::linear(xs, ws, bs);
      if (bias) EXPECT_TRUE(torch::equal(bs.detach(), b)) << "the bias was written to";  // one row: no aliasing
      (y * upstream).sum().backward();
      return std::vector<torch::Tensor>{y.detach(), xs.grad(), ws.grad(), bias ? bs.grad() : torch::zeros({1})};
    };
    const auto want = run(false), got = run(true);
    for (size_t i = 0; i < want.size(); ++i) {
      SCOPED_TRACE(i);
      ASSERT_EQ(got[i].sizes(), want[i].sizes());
      EXPECT_TRUE(torch::allclose(got[i], want[i], 1e-5, 1e-4)) << (got[i] - want[i]).abs().max().item<double>();
    }
  }
}
