// One bucket plan for the reducer and the cluster performance model: the closed-form parameter list matches the
// LibTorch model's, the planned buckets hold every parameter byte, and the plan fills buckets in reverse order.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "collectives/buckets.h"
#include "models/bert.h"
#include "models/bert_config.h"
#include "trainer/sim/perf_model.h"

namespace joule {
namespace {

const std::string kConfigs = JOULE_CONFIG_DIR;

TEST(Buckets, PlanMatchesTheReducersAndTheModelsParameters) {
  const models::BertConfig c = models::load_config("bert-base", kConfigs + "/models");
  models::BertForPreTraining model(c);
  const auto real = model->hf_named_parameters();
  const auto closed = models::parameter_numels(c);
  ASSERT_EQ(real.size(), closed.size());
  for (size_t i = 0; i < real.size(); ++i) {
    EXPECT_EQ(real[i].first, closed[i].first) << i;
    EXPECT_EQ(real[i].second.numel(), closed[i].second) << closed[i].first;
  }
  // The Linear weights by their names (the performance model's view) are the model's Linear modules' weights.
  std::vector<std::string> by_name;
  for (const auto& [name, numel] : closed)
    if (models::is_matmul_weight(name)) by_name.push_back(name);
  EXPECT_EQ(by_name, model->matmul_weight_names());
  EXPECT_EQ(by_name.size(), 6u * static_cast<size_t>(c.num_hidden_layers) + 3);  // + pooler, MLM transform, NSP
  const auto planned = sim::planned_bucket_bytes(c);
  double total = 0;
  for (double b : planned) total += b;
  EXPECT_DOUBLE_EQ(total, 4.0 * models::parameter_counts(c).total());
  EXPECT_LE(planned.front(), 1 << 20);  // DDP's small first bucket
  // Reverse order: the first bucket holds the last parameters.
  const auto groups = collectives::plan_buckets({10, 20, 30, 40}, 50, 40);
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0], (std::vector<size_t>{3}));
  EXPECT_EQ(groups[1], (std::vector<size_t>{2, 1}));
  EXPECT_EQ(groups[2], (std::vector<size_t>{0}));
  // Kinds: a bucket holds one kind; each kind fills its own; buckets launch in the order of their last parameter
  // (kind 0's [5, 2] is complete when parameter 2 comes, before kind 1's [3, 1], though it was filled first).
  const auto kinded = collectives::plan_buckets({10, 10, 10, 10, 10, 10, 10}, 25, 25, {1, 1, 0, 1, 1, 0, 1});
  ASSERT_EQ(kinded.size(), 4u);
  EXPECT_EQ(kinded[0], (std::vector<size_t>{6, 4}));
  EXPECT_EQ(kinded[1], (std::vector<size_t>{5, 2}));
  EXPECT_EQ(kinded[2], (std::vector<size_t>{3, 1}));
  EXPECT_EQ(kinded[3], (std::vector<size_t>{0}));
  EXPECT_EQ(collectives::plan_buckets({10, 20, 30, 40}, 50, 40, {0, 0, 0, 0}), groups);
}

}  // namespace
}  // namespace joule
