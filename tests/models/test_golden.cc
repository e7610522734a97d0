// The C++ model against an independent PyTorch-Python implementation (tools/reference/bert_golden.py):
// same weights, same batch; losses to 1e-5 relative, every parameter's gradient norm to 1e-4 relative, and gradient
// values on slices of every tensor (its first, middle and last elements) to 2e-4 of the tensor's RMS gradient.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>

#include <nlohmann/json.hpp>

#include "models/bf16_linear.h"
#include "models/model_dir.h"
#include "test_util.h"

namespace {

torch::Tensor tensor_of(const nlohmann::json& rows) {
  std::vector<int64_t> flat;
  int64_t cols = -1;
  for (const auto& r : rows) {
    if (r.is_array()) {
      cols = static_cast<int64_t>(r.size());
      for (const auto& v : r) flat.push_back(v.get<int64_t>());
    } else {
      flat.push_back(r.get<int64_t>());
    }
  }
  torch::Tensor t = torch::tensor(flat, torch::kInt64);
  return cols >= 0 ? t.view({-1, cols}) : t;
}

const std::string kGolden = std::string(JOULE_TEST_FIXTURES) + "/golden";

// batch.json, or packed_batch.json: the same sequences packed two a row.
joule::models::PretrainingBatch golden_batch(const std::string& file = "batch.json") {
  const auto batch_json = nlohmann::json::parse(joule::test::read_file(kGolden + "/" + file));
  joule::models::PretrainingBatch b;
  b.input_ids = tensor_of(batch_json["input_ids"]);
  b.token_type_ids = tensor_of(batch_json["token_type_ids"]);
  b.attention_mask = tensor_of(batch_json["attention_mask"]);
  b.masked_positions = tensor_of(batch_json["masked_positions"]);
  b.masked_ids = tensor_of(batch_json["masked_ids"]);
  b.next_sentence_labels = tensor_of(batch_json["next_sentence_labels"]);
  if (batch_json.contains("sequence_lengths")) {
    b.sequence_lengths = tensor_of(batch_json["sequence_lengths"]);
    b.packed_sequences = b.sequence_lengths.gt(0).sum().item<int64_t>();
  }
  return b;
}

double cosine(const torch::Tensor& a, const torch::Tensor& b) {
  const torch::Tensor x = a.flatten().to(torch::kFloat64), y = b.flatten().to(torch::kFloat64);
  return (x.dot(y) / (x.norm() * y.norm())).item<double>();
}

}  // namespace

// The fp32 model against the reference, its Linear layers' GEMMs on `gemm`, on `batch_file` against `expected_file`.
// ASSERTs end only this call.
static void expect_golden(joule::launch::Fp32Gemm gemm, const std::string& batch_file = "batch.json",
                          const std::string& expected_file = "expected.json") {
  const std::string dir = kGolden;
  auto model = joule::models::load_model_dir(dir);
  model->set_precision(joule::models::Precision::kFp32, gemm);
  EXPECT_EQ(model->config().hidden_dropout_prob, 0.0);
  model->train();  // dropout is 0: training mode must still be deterministic

  const auto expected = nlohmann::json::parse(joule::test::read_file(dir + "/" + expected_file));
  const joule::models::PretrainingBatch b = golden_batch(batch_file);

  auto out = model->forward(b);
  out.loss.backward();
  auto rel = [](double got, double want) { return std::abs(got - want) / std::abs(want); };
  EXPECT_LT(rel(out.mlm_loss.item<double>(), expected["mlm_loss"]), 1e-5) << out.mlm_loss.item<double>();
  EXPECT_LT(rel(out.nsp_loss.item<double>(), expected["nsp_loss"]), 1e-5) << out.nsp_loss.item<double>();
  EXPECT_LT(rel(out.loss.item<double>(), expected["loss"]), 1e-5);

  const auto& norms = expected["grad_norms"];
  auto params = model->hf_named_parameters();
  EXPECT_EQ(params.size(), norms.size());
  double largest = 0;
  for (const auto& [name, norm] : norms.items()) largest = std::max(largest, norm.get<double>());
  // The attention key bias gets an exactly-zero gradient (softmax ignores a per-row shift), so both
  // sides hold only rounding noise there: such norms must be tiny on both sides, not equal.
  const double zero = 1e-7 * largest;
  int compared = 0;
  for (const auto& [name, p] : params) {
    ASSERT_TRUE(norms.contains(name)) << name << " missing from the fixture";
    const double want = norms[name], got = p.grad().norm().item<double>();
    if (want < zero) {
      EXPECT_LT(got, zero) << name << ": reference gradient is zero, got norm " << got;
      EXPECT_NE(name.find("attention.self.key.bias"), std::string::npos) << name << " unexpectedly has no gradient";
      continue;
    }
    EXPECT_LT(rel(got, want), 1e-4) << name << ": got " << got << ", reference " << want;
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<int>(params.size()) - 2);  // all but the two key biases

  // Values on slices of every tensor: a gradient with the right norm but wrong entries (a transposed weight,
  // swapped heads) fails here.
  const auto& slices = expected["grad_slices"];
  int values = 0;
  for (const auto& [name, p] : params) {
    ASSERT_TRUE(slices.contains(name)) << name << " has no gradient slice in the fixture";
    const torch::Tensor flat = p.grad().flatten().to(torch::kFloat64);
    const double rms = norms[name].get<double>() / std::sqrt(static_cast<double>(flat.numel()));
    const double tolerance = std::max(2e-4 * rms, 1e-7 * largest);
    const auto& offsets = slices[name]["offsets"];
    const auto& want = slices[name]["values"];
    ASSERT_EQ(offsets.size(), want.size()) << name;
    for (size_t i = 0; i < offsets.size(); ++i) {
      const int64_t at = offsets[i].get<int64_t>();
      ASSERT_LT(at, flat.numel()) << name;
      const double got = flat[at].item<double>();
      EXPECT_NEAR(got, want[i].get<double>(), tolerance) << name << "[" << at << "]";
      ++values;
    }
  }
  EXPECT_GT(values, static_cast<int>(params.size()) * 8);
}

TEST(Golden, MatchesPythonReferenceLossesGradientNormsAndValues) { expect_golden(joule::launch::Fp32Gemm::kBlas); }

// Packed rows (the same four sequences two a row) against the reference's own packed forward, which it checked to
// equal the padded batch's figures and each sequence's alone: joule's packed rows give the unpadded loss and gradients.
TEST(Golden, PackedRowsMatchThePythonReferencesPackedForward) {
  expect_golden(joule::launch::Fp32Gemm::kBlas, "packed_batch.json", "packed_expected.json");
}

// And joule's own packed and padded forwards of the same sequences agree with each other as closely.
TEST(Golden, PackedRowsMatchThePaddedBatchsFigures) {
  expect_golden(joule::launch::Fp32Gemm::kBlas, "packed_batch.json", "expected.json");
}

// The same tolerances with the fp32 Linear layers on oneDNN's sgemm (train.fp32_gemm = onednn).
TEST(Golden, MatchesPythonReferenceWithFp32GemmsOnOnednn) {
#if !JOULE_ONEDNN
  GTEST_SKIP() << "built without oneDNN (JOULE_ONEDNN=OFF)";
#endif
  expect_golden(joule::launch::Fp32Gemm::kOnednn);
}

// bf16 mixed precision against the same golden: losses within 1e-2 relative of the reference's fp32 figures, and
// every gradient tensor pointing the same way as the fp32 model's (cosine similarity >= 0.99), parameters fp32.
// The same for packed rows (bf16's packed attention: a mask for each query, in the fused CPU softmax).
static void expect_bf16_golden(const std::string& batch_file) {
  auto model = joule::models::load_model_dir(kGolden);
  model->train();
  const auto expected = nlohmann::json::parse(joule::test::read_file(kGolden + "/expected.json"));
  const joule::models::PretrainingBatch b = golden_batch(batch_file);

  std::map<std::string, torch::Tensor> fp32_grads;
  {
    auto out = model->forward(b);
    out.loss.backward();
    for (const auto& [name, p] : model->hf_named_parameters()) fp32_grads[name] = p.grad().clone();
    model->zero_grad();
  }
  model->set_precision(joule::models::Precision::kBf16);
  auto out = model->forward(b);
  EXPECT_EQ(out.loss.scalar_type(), torch::kFloat);
  out.loss.backward();
  auto rel = [](double got, double want) { return std::abs(got - want) / std::abs(want); };
  EXPECT_LT(rel(out.mlm_loss.item<double>(), expected["mlm_loss"]), 1e-2) << out.mlm_loss.item<double>();
  EXPECT_LT(rel(out.nsp_loss.item<double>(), expected["nsp_loss"]), 1e-2) << out.nsp_loss.item<double>();
  EXPECT_LT(rel(out.loss.item<double>(), expected["loss"]), 1e-2);

  int compared = 0;
  for (const auto& [name, p] : model->hf_named_parameters()) {
    ASSERT_EQ(p.scalar_type(), torch::kFloat) << name << ": master weights stay fp32";
    ASSERT_EQ(p.grad().scalar_type(), torch::kFloat) << name << ": gradients accumulate in fp32";
    // The key biases' true gradient is zero (softmax ignores a per-row shift): both sides hold rounding noise.
    if (name.find("attention.self.key.bias") != std::string::npos) continue;
    EXPECT_GE(cosine(p.grad(), fp32_grads[name]), 0.99) << name;
    ++compared;
  }
  EXPECT_EQ(compared, static_cast<int>(fp32_grads.size()) - 2);
}

TEST(Golden, Bf16LossesWithinOnePercentAndGradientsAlignWithFp32) { expect_bf16_golden("batch.json"); }
TEST(Golden, Bf16PackedRowsWithinOnePercentAndGradientsAlignWithFp32) { expect_bf16_golden("packed_batch.json"); }

// The same where joule's oneDNN bf16 GEMMs do not run (a CPU without AVX-512: each bf16 GEMM emulated in fp32), on any
// host.
TEST(Golden, Bf16EmulatedInFp32GemmsWithinOnePercentAndGradientsAlignWithFp32) {
  const joule::models::WithoutBf16GemmsForTesting without;
  expect_bf16_golden("batch.json");
  expect_bf16_golden("packed_batch.json");
}

// bf16 packed rows against bf16 padded rows of the same sequences: the same arithmetic but for the shapes, so the
// losses agree to bf16's rounding and every gradient points the same way far more closely than either does to fp32.
TEST(Golden, Bf16PackedRowsMatchBf16PaddedRows) {
  auto model = joule::models::load_model_dir(kGolden);
  model->train();
  model->set_precision(joule::models::Precision::kBf16);
  std::map<std::string, torch::Tensor> padded;
  auto a = model->forward(golden_batch("batch.json"));
  a.loss.backward();
  for (const auto& [name, p] : model->hf_named_parameters()) padded[name] = p.grad().clone();
  model->zero_grad();
  auto b = model->forward(golden_batch("packed_batch.json"));
  b.loss.backward();
  EXPECT_NEAR(b.mlm_loss.item<double>(), a.mlm_loss.item<double>(), 2e-3 * a.mlm_loss.item<double>());
  EXPECT_NEAR(b.nsp_loss.item<double>(), a.nsp_loss.item<double>(), 2e-3 * a.nsp_loss.item<double>());
  double worst = 1;
  std::string worst_name;
  for (const auto& [name, p] : model->hf_named_parameters()) {
    if (name.find("attention.self.key.bias") != std::string::npos) continue;
    const double c = cosine(p.grad(), padded[name]);
    if (c < worst) worst = c, worst_name = name;
  }
  EXPECT_GE(worst, 0.999) << worst_name;
  std::cout << "bf16 packed vs padded: lowest gradient cosine " << worst << " (" << worst_name << ")\n";
}
