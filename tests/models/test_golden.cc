// The C++ model against an independent PyTorch-Python implementation (tools/reference/bert_golden.py):
// same weights, same batch; losses to 1e-5 relative, every parameter's gradient norm to 1e-4 relative, and gradient
// values on slices of every tensor (its first, middle and last elements) to 2e-4 of the tensor's RMS gradient.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <nlohmann/json.hpp>

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

}  // namespace

TEST(Golden, MatchesPythonReferenceLossesGradientNormsAndValues) {
  const std::string dir = std::string(JOULE_TEST_FIXTURES) + "/golden";
  auto model = joule::models::load_model_dir(dir);
  EXPECT_EQ(model->config().hidden_dropout_prob, 0.0);
  model->train();  // dropout is 0: training mode must still be deterministic

  const auto batch_json = nlohmann::json::parse(joule::test::read_file(dir + "/batch.json"));
  const auto expected = nlohmann::json::parse(joule::test::read_file(dir + "/expected.json"));
  joule::models::PretrainingBatch b;
  b.input_ids = tensor_of(batch_json["input_ids"]);
  b.token_type_ids = tensor_of(batch_json["token_type_ids"]);
  b.attention_mask = tensor_of(batch_json["attention_mask"]);
  b.masked_positions = tensor_of(batch_json["masked_positions"]);
  b.masked_ids = tensor_of(batch_json["masked_ids"]);
  b.next_sentence_labels = tensor_of(batch_json["next_sentence_labels"]);

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
