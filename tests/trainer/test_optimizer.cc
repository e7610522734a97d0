// LAMB and AdamW: one hand-computed update, and a multi-step trajectory against an independent
// Python reference (tools/reference/lamb_golden.py); the warm-up + poly-decay schedule.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "launch/util/error.h"
#include "test_util.h"
#include "trainer/checkpoint.h"
#include "trainer/optimizer.h"
#include "trainer/run_config.h"

using joule::trainer::create_optimizer;
using joule::trainer::OptimizerOptions;

TEST(Lamb, OneHandComputedUpdate) {
  torch::Tensor w = torch::tensor({1.0f, 2.0f}).set_requires_grad(true);
  torch::Tensor b = torch::tensor({0.5f}).set_requires_grad(true);
  w.mutable_grad() = torch::tensor({0.1f, 0.2f});
  b.mutable_grad() = torch::tensor({0.3f});
  auto opt = create_optimizer({}, {{"x.weight", w}, {"x.bias", b}});
  const double norm = opt->step(0.5);
  EXPECT_NEAR(norm, std::sqrt(0.01 + 0.04 + 0.09), 1e-7);  // below 1.0: no clipping
  // Step 1: bias-corrected moments are g and g^2, so the Adam direction is g / (|g| + eps).
  const double eps = 1e-6, wd = 0.01;
  const double u0 = 0.1 / (0.1 + eps) + wd * 1.0, u1 = 0.2 / (0.2 + eps) + wd * 2.0;
  const double ratio = std::sqrt(1.0 + 4.0) / std::sqrt(u0 * u0 + u1 * u1);
  EXPECT_NEAR(w[0].item<double>(), 1.0 - 0.5 * ratio * u0, 1e-6);
  EXPECT_NEAR(w[1].item<double>(), 2.0 - 0.5 * ratio * u1, 1e-6);
  // The bias: no weight decay and no trust ratio.
  EXPECT_NEAR(b[0].item<double>(), 0.5 - 0.5 * (0.3 / (0.3 + eps)), 1e-6);
  EXPECT_EQ(opt->steps(), 1);
}

TEST(Lamb, ClipsByTheGlobalNorm) {
  torch::Tensor w = torch::tensor({3.0f, 4.0f}).set_requires_grad(true);
  w.mutable_grad() = torch::tensor({30.0f, 40.0f});  // norm 50
  auto opt = create_optimizer({}, {{"w.weight", w}});
  EXPECT_NEAR(opt->step(0.0), 50.0, 1e-5);
  // The first moment is (1 - beta1) times the gradient scaled to norm 1.
  const torch::Tensor m = opt->state()[0].values;
  EXPECT_NEAR(m[0].item<double>(), 0.1 * 0.6, 1e-7);
  EXPECT_NEAR(m[1].item<double>(), 0.1 * 0.8, 1e-7);
}

// Parameters with decay (trust ratio) and without, one spanning several of the optimizer's 2^16-element chunks, over
// steps with and without clipping. Contiguous CPU float32 parameters take lamb_cpu's fused loops; a transposed view
// of the same values takes the tensor-op path other devices use.
std::vector<torch::Tensor> lamb_run(bool fused, int threads) {
  torch::manual_seed(11);
  const torch::Tensor w0 = torch::randn({700, 300}), b0 = torch::randn({300});
  torch::Tensor w = fused ? w0.clone() : w0.t().contiguous().t();
  w.set_requires_grad(true);
  torch::Tensor b = b0.clone().set_requires_grad(true);
  EXPECT_EQ(w.is_contiguous(), fused);
  const int before = torch::get_num_threads();
  torch::set_num_threads(threads);
  auto opt = create_optimizer({}, {{"l.weight", w}, {"l.bias", b}});
  for (int t = 0; t < 4; ++t) {
    const float size = t % 2 == 0 ? 1e-3f : 1.0f;  // global norm below and above max_grad_norm = 1
    w.mutable_grad() = torch::randn({700, 300}).mul_(size);
    if (!fused) w.mutable_grad() = w.grad().t().contiguous().t();
    b.mutable_grad() = torch::randn({300}).mul_(size);
    opt->step(1e-2);
  }
  torch::set_num_threads(before);
  std::vector<torch::Tensor> out{w.detach().contiguous(), b.detach().clone()};
  for (const auto& piece : opt->state()) out.push_back(piece.values.contiguous());
  return out;
}

TEST(Lamb, FusedCpuLoopsMatchTensorOpsAndAnyThreadCount) {
  const auto fused = lamb_run(true, 1), ops = lamb_run(false, 1), fused2 = lamb_run(true, 2);
  ASSERT_EQ(fused.size(), 6u);
  for (size_t i = 0; i < fused.size(); ++i) {
    SCOPED_TRACE(i);
    // Measured against the tensor's scale (single elements can be near 0). The tensor-op path's float32 norm()
    // puts the clipping scale ~1e-6 off the fused path's double sums, v (gradient squared) twice that; computing
    // 1 - beta2 in float32 instead of double was 1.3e-5 off.
    const double scale = ops[i].abs().max().item<double>();
    EXPECT_LT((fused[i] - ops[i]).abs().max().item<double>(), 5e-6 * scale);
    EXPECT_TRUE(torch::equal(fused[i], fused2[i]));  // fixed chunks: the same sums in the same order
  }
}

TEST(Optimizer, NonFiniteGradientsLeaveEverythingAsItWas) {
  for (const char* name : {"lamb", "adamw"}) {
    for (float bad : {std::nanf(""), INFINITY}) {
      SCOPED_TRACE(std::string(name) + " " + std::to_string(bad));
      torch::Tensor w = torch::tensor({1.0f, 2.0f}).set_requires_grad(true);
      OptimizerOptions o;
      o.name = *joule::parse_choice<joule::trainer::OptimizerName>(name, joule::trainer::kOptimizerWords);
      auto opt = create_optimizer(o, {{"w.weight", w}});
      w.mutable_grad() = torch::tensor({0.1f, 0.2f});
      opt->step(0.1);
      const torch::Tensor before = w.detach().clone();
      const auto state_before = opt->state();
      std::vector<torch::Tensor> moments;
      for (const auto& piece : state_before) moments.push_back(piece.values.clone());
      w.mutable_grad() = torch::tensor({bad, 0.2f});
      EXPECT_FALSE(std::isfinite(opt->step(0.1)));
      EXPECT_TRUE(torch::equal(w.detach(), before));
      for (size_t i = 0; i < moments.size(); ++i) EXPECT_TRUE(torch::equal(opt->state()[i].values, moments[i]));
      EXPECT_EQ(opt->steps(), 1);  // the bias correction and the schedule do not advance
      w.mutable_grad() = torch::tensor({0.1f, 0.2f});
      EXPECT_TRUE(std::isfinite(opt->step(0.1)));
      EXPECT_EQ(opt->steps(), 2);
    }
  }
}

TEST(Lamb, TrajectoryMatchesPythonReference) {
  const auto ref =
      nlohmann::json::parse(joule::test::read_file(std::string(JOULE_TEST_FIXTURES) + "/optimizer/trajectory.json"));
  for (const std::string kind : {"lamb", "adamw"}) {
    SCOPED_TRACE(kind);
    std::vector<std::pair<std::string, torch::Tensor>> params;
    for (size_t i = 0; i < ref["names"].size(); ++i) {
      auto shape = ref["shapes"][i].get<std::vector<int64_t>>();
      params.emplace_back(
          ref["names"][i].get<std::string>(),
          torch::tensor(ref["initial"][i].get<std::vector<float>>()).view(shape).set_requires_grad(true));
    }
    OptimizerOptions o;
    o.name = *joule::parse_choice<joule::trainer::OptimizerName>(kind, joule::trainer::kOptimizerWords);
    auto opt = create_optimizer(o, params);
    const int64_t steps = ref["steps"];
    for (int64_t t = 0; t < steps; ++t) {
      for (size_t i = 0; i < params.size(); ++i)
        params[i].second.mutable_grad() =
            torch::tensor(ref["grads"][t][i].get<std::vector<float>>()).view(params[i].second.sizes());
      const double lr = joule::trainer::learning_rate(ref["base_lr"], t, steps, ref["warmup_fraction"]);
      EXPECT_NEAR(lr, ref[kind]["lrs"][t].get<double>(), 1e-12) << "step " << t;
      const double norm = opt->step(lr);
      EXPECT_NEAR(norm, ref[kind]["grad_norms"][t].get<double>(), 1e-5 * ref[kind]["grad_norms"][t].get<double>())
          << "step " << t;
    }
    for (size_t i = 0; i < params.size(); ++i) {
      torch::Tensor want =
          torch::tensor(ref[kind]["final"][i].get<std::vector<float>>()).view(params[i].second.sizes());
      EXPECT_TRUE(torch::allclose(params[i].second, want, 1e-5, 1e-6))
          << params[i].first << " max diff " << (params[i].second - want).abs().max().item<double>();
    }
  }
}

TEST(Lamb, StateRoundTripAndReset) {
  torch::Tensor w = torch::ones({3}).set_requires_grad(true);
  w.mutable_grad() = torch::full({3}, 0.5f);
  auto a = create_optimizer({}, {{"w.weight", w}});
  a->step(0.1);
  const auto state = a->state();
  ASSERT_EQ(state.size(), 2u);
  EXPECT_EQ(state[0].name, "exp_avg.w.weight");
  std::vector<std::pair<std::string, torch::Tensor>> by_name;
  for (const auto& piece : state) by_name.emplace_back(piece.name, piece.values);
  torch::Tensor w2 = w.detach().clone().set_requires_grad(true);
  w2.mutable_grad() = torch::full({3}, 0.5f);
  auto b = create_optimizer({}, {{"w.weight", w2}});
  b->load_state(by_name, a->steps());
  a->step(0.1);
  b->step(0.1);
  EXPECT_TRUE(torch::equal(w, w2));  // the same state gives the same next update, bit for bit
  b->reset();
  EXPECT_EQ(b->steps(), 0);
  EXPECT_EQ(b->state()[0].values.abs().sum().item<double>(), 0.0);
  EXPECT_THROW(b->load_state(std::vector<std::pair<std::string, torch::Tensor>>{}, 1), joule::trainer::CheckpointError);
}

TEST(Schedule, WarmupThenPolyDecay) {
  using joule::trainer::learning_rate;
  EXPECT_DOUBLE_EQ(learning_rate(6e-3, 0, 7038, 0.2843), 0.0);
  EXPECT_NEAR(learning_rate(6e-3, 1000, 7038, 0.2843), 6e-3 * (1000.0 / 7038) / 0.2843, 1e-15);
  const int64_t peak = static_cast<int64_t>(std::ceil(0.2843 * 7038));
  EXPECT_NEAR(learning_rate(6e-3, peak, 7038, 0.2843), 6e-3, 1e-5);
  EXPECT_NEAR(learning_rate(6e-3, 5000, 7038, 0.2843), 6e-3 * std::sqrt((1 - 5000.0 / 7038) / (1 - 0.2843)), 1e-15);
  EXPECT_EQ(learning_rate(6e-3, 7038, 7038, 0.2843), 0.0);
  EXPECT_THROW(learning_rate(1, 0, 0, 0.1), joule::InternalError);
}
