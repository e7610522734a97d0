// ZeRO-1 at 2 and 4 ranks (joule_mpi_tests): the sharded optimizer's weights against the unsharded one's after
// training steps, in fp32 and bf16; the sharded checkpoint read back by any world size and either sharding.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "collectives/communicator.h"
#include "collectives/reducer.h"
#include "launch/cpu_isa.h"
#include "models/bert.h"
#include "models/precision_ops.h"
#include "tests/support/test_util.h"
#include "trainer/checkpoint.h"
#include "trainer/optimizer.h"
#include "trainer/train_step.h"

namespace {

namespace fs = std::filesystem;
using joule::collectives::GradientReducer;
using joule::collectives::ReducerOptions;
using joule::trainer::OptimizerShard;

joule::collectives::Communicator& zero1_comm() {
  static std::unique_ptr<joule::collectives::Communicator> c = joule::collectives::create_communicator("mpi");
  return *c;
}

// With dropout: the steps draw from each rank's generator, the same in both runs.
joule::models::BertConfig model_config() { return joule::test::small_bert(300, 48, 2, 96, 32, /*dropout=*/0.1); }

ReducerOptions reducer_options(bool shard) {
  ReducerOptions o;
  o.bucket_bytes = 20000;  // several buckets, and shard boundaries that cut parameters
  o.first_bucket_bytes = 4000;
  o.shard = shard;
  return o;
}

OptimizerShard optimizer_shard(const GradientReducer& reducer) {
  OptimizerShard shard;
  if (!reducer.sharded()) return shard;
  shard.ranges = reducer.shard_ranges();
  shard.sum_over_ranks = [](std::vector<double>& v) { joule::collectives::sum_over_ranks(zero1_comm(), v); };
  shard.masters = reducer.masters();
  return shard;
}

struct Trained {
  std::unique_ptr<joule::models::BertForPreTraining> model;
  std::unique_ptr<GradientReducer> reducer;
  std::unique_ptr<joule::trainer::Optimizer> optimizer;
};

// `steps` LAMB steps of 2 micro-batches on this rank's synthetic rows; weights from rank 0.
Trained train(bool shard, joule::models::Precision precision, int steps) {
  const int r = zero1_comm().info().rank;
  torch::manual_seed(1234 + r);
  Trained t;
  t.model = std::make_unique<joule::models::BertForPreTraining>(model_config(), 5);
  (*t.model)->set_precision(precision);
  (*t.model)->train();
  ReducerOptions options = reducer_options(shard);
  if (precision == joule::models::Precision::kBf16) options.bf16_parameters = (*t.model)->matmul_weight_names();
  t.reducer = std::make_unique<GradientReducer>((*t.model)->hf_named_parameters(), zero1_comm(), options);
  t.reducer->broadcast_parameters(0);
  t.optimizer = joule::trainer::create_optimizer({}, (*t.model)->hf_named_parameters(), optimizer_shard(*t.reducer));
  joule::trainer::TrainStep step(*t.model, *t.reducer, *t.optimizer, zero1_comm(), 60, 2);
  uint64_t batch = 0;
  for (int s = 0; s < steps; ++s) {
    const double lr = s == 0 ? 1e-2 : 5e-3;  // large enough that a wrong shard shows
    step.run([&] { return joule::models::synthetic_batch(model_config(), 2, 24, 4, 100 * r + batch++); }, lr);
  }
  return t;
}

// The fp32 weights (collective: ZeRO-1's bf16 weights are gathered from their master shards).
std::vector<torch::Tensor> weights(const Trained& t) {
  t.reducer->hold_fp32_weights();
  std::vector<torch::Tensor> out;
  for (const auto& [name, p] : (*t.model)->hf_named_parameters()) out.push_back(p.detach().clone());
  return out;
}

}  // namespace

// Every rank holds the whole model after each step (the all-gather), equal to the unsharded run's to fp32 rounding.
// Bit for bit where the summation order allows it: at 2 ranks a reduce-scatter and Open MPI's ring all-reduce add the
// same two gradients (measured: every tensor identical, in fp32 and bf16); at 4 ranks they add four in another order
// (measured: 5 or 6 of 44 tensors identical in fp32, 36 in bf16, the rest within 1e-6 of the tensor's scale). A
// parameter a shard boundary cuts has its norm summed in another order too, which has not changed a rounded result
// here.
TEST(Zero1, WeightsEqualTheUnshardedOptimizersInFp32AndBf16) {
  std::vector<joule::models::Precision> precisions = {joule::models::Precision::kFp32};
  // bf16 where its GEMMs run in hardware or are emulated in fp32 ones (models/bf16_linear.h): not where oneDNN would
  // emulate them in AVX-512 code, at a fraction of fp32's speed.
  if (joule::launch::CpuIsa::current().native_bf16() ||
      joule::models::emulates_bf16_gemm(torch::ones({1}, torch::kBFloat16)))
    precisions.push_back(joule::models::Precision::kBf16);
  for (const auto precision : precisions) {
    SCOPED_TRACE(joule::models::precision_name(precision));
    const Trained none = train(false, precision, 3), zero1 = train(true, precision, 3);
    EXPECT_FALSE(none.optimizer->sharded());
    EXPECT_TRUE(zero1.optimizer->sharded());
    // bf16: zero1 held the Linear weights in bf16 (gathered from fp32 masters); none keeps every parameter fp32.
    const auto held = [](const Trained& t) {
      int n = 0;
      for (const auto& [name, p] : (*t.model)->hf_named_parameters()) n += p.scalar_type() == torch::kBFloat16;
      return n;
    };
    const bool bf16 = precision == joule::models::Precision::kBf16;
    EXPECT_EQ(held(zero1), bf16 ? static_cast<int>((*zero1.model)->matmul_weight_names().size()) : 0);
    EXPECT_EQ(held(none), 0);
    EXPECT_GT((*zero1.model)->matmul_weight_names().size(), 4u);
    const auto a = weights(none), b = weights(zero1);
    EXPECT_EQ(held(zero1), 0);
    ASSERT_EQ(a.size(), b.size());
    int identical = 0, compared = 0;
    double worst = 0;
    std::vector<std::string> names;
    for (const auto& [name, p] : (*none.model)->hf_named_parameters()) names.push_back(name);
    for (size_t i = 0; i < a.size(); ++i) {
      // The attention's key bias adds the same amount to every score of a query, which softmax ignores: its gradient
      // is rounding noise, and LAMB (no trust ratio on biases) steps along that noise's sign. Another summation order
      // (4 ranks: Open MPI's ring all-reduce and its reduce-scatter add in different orders) draws other noise. The
      // weights that learn are what this compares.
      if (names[i].find("attention.self.key.bias") != std::string::npos) continue;
      const double scale = a[i].abs().max().item<double>() + 1e-12;
      const double diff = (a[i] - b[i]).abs().max().item<double>() / scale;
      worst = std::max(worst, diff);
      identical += torch::equal(a[i], b[i]) ? 1 : 0;
      ++compared;
      EXPECT_LT(diff, 2e-6) << names[i];
    }
    // The training moved the weights: a test of equal weights must not pass on an update that never happened.
    const Trained fresh = train(false, precision, 0);
    EXPECT_GT((weights(fresh)[0] - a[0]).abs().max().item<double>(), 1e-4);
    if (zero1_comm().info().rank == 0)
      std::printf(
          "zero1 vs none, %s, %d ranks: %d of %d tensors bit-identical (key biases aside), largest difference "
          "%.3g of the tensor's scale\n",
          joule::models::precision_name(precision), zero1_comm().info().world_size, identical, compared, worst);
    // Each rank keeps moments for its own share only: 1/N of the elements (the bucket padding aside).
    int64_t mine = 0, all = 0;
    for (const auto& p : zero1.optimizer->state()) mine += p.values.numel();
    for (const auto& p : none.optimizer->state()) all += p.values.numel();
    const int n = zero1_comm().info().world_size;
    EXPECT_LE(mine, all / n + 2 * 16 * static_cast<int64_t>(zero1.reducer->buckets().size()) * 2);
  }
}

// A zero1 checkpoint (one optimizer file per rank) read back unsharded and by the ranks of other world sizes: every
// rank's part of every moment equals the matching elements of the whole moments, and the unsharded reader's whole
// moments equal the ranks' own parts.
TEST(Zero1, ACheckpointOfShardsLoadsOnAnyWorldSizeAndSharding) {
  auto& comm = zero1_comm();
  const int rank = comm.info().rank, world = comm.info().world_size;
  Trained t = train(true, joule::models::Precision::kFp32, 2);
  std::string root = "/tmp/joule_zero1_ckpt_" + std::to_string(world);
  if (rank == 0) fs::remove_all(root);
  comm.barrier();
  joule::trainer::TrainerState state;
  state.step = 2;
  state.world_size = world;
  state.config_hash = "test";
  const std::string dir = joule::trainer::save_checkpoint(root, *t.model, *t.optimizer, state, comm, 2, 600);
  EXPECT_TRUE(fs::exists(
      fs::path(dir) / ("optimizer_shard_" + std::to_string(rank) + "_of_" + std::to_string(world) + ".safetensors")));
  EXPECT_FALSE(fs::exists(fs::path(dir) / "optimizer.safetensors"));
  EXPECT_EQ(joule::trainer::verify_checkpoint(dir), "");

  // Unsharded: the whole moments.
  joule::models::BertForPreTraining whole_model(model_config(), 9);
  auto whole = joule::trainer::create_optimizer({}, whole_model->hf_named_parameters());
  joule::trainer::load_checkpoint(dir, whole_model, *whole, rank, world);
  EXPECT_EQ(whole->steps(), 2);
  const auto whole_state = whole->state();
  const auto own = t.optimizer->state();
  ASSERT_EQ(whole_state.size(), own.size());
  for (size_t i = 0; i < own.size(); ++i) {
    const auto part = whole_state[i].values.reshape({-1}).narrow(0, own[i].begin, own[i].values.numel());
    EXPECT_TRUE(torch::equal(part, own[i].values.reshape({-1}))) << own[i].name;
  }
  // The weights too: every rank wrote nothing of them but rank 0's whole model.
  const auto trained = weights(t);
  size_t k = 0;
  for (const auto& [name, p] : whole_model->hf_named_parameters()) EXPECT_TRUE(torch::equal(p, trained[k++])) << name;

  // Sharded for 1, 3 and 5 ranks (each of their ranks): parts of the same whole.
  std::vector<int64_t> elements;
  for (const auto& [name, p] : whole_model->hf_named_parameters()) elements.push_back(p.numel());
  for (int other : {1, 3, 5}) {
    for (int r = 0; r < other; ++r) {
      SCOPED_TRACE("world " + std::to_string(other) + " rank " + std::to_string(r));
      joule::models::BertForPreTraining m(model_config(), 11);
      OptimizerShard shard;
      shard.ranges = joule::collectives::plan_shard_ranges(elements, t.reducer->bucket_plan(), other, r);
      shard.sum_over_ranks = [](std::vector<double>&) {};
      auto part = joule::trainer::create_optimizer({}, m->hf_named_parameters(), shard);
      joule::trainer::load_checkpoint(dir, m, *part, rank, world);
      const auto got = part->state();
      for (size_t i = 0; i < got.size(); ++i) {
        const auto want = whole_state[i].values.reshape({-1}).narrow(0, got[i].begin, got[i].values.numel());
        EXPECT_TRUE(torch::equal(want, got[i].values.reshape({-1}))) << got[i].name;
      }
    }
  }
  // A checkpoint whose manifest leaves out one rank's shard (a hand-edited or damaged one that still verifies): the
  // reader names the elements no file holds instead of loading zeros for them.
  if (rank == 0) {
    const std::string gap = root + "/gap";
    fs::copy(dir, gap, fs::copy_options::recursive);
    const std::string missing = "optimizer_shard_1_of_" + std::to_string(world) + ".safetensors";
    fs::remove(fs::path(gap) / missing);
    std::ifstream in(fs::path(gap) / "manifest.json");
    nlohmann::json manifest = nlohmann::json::parse(in);
    manifest["files"].erase(missing);
    auto& files = manifest["optimizer"]["files"];
    files.erase(std::find(files.begin(), files.end(), missing));
    std::ofstream(fs::path(gap) / "manifest.json") << manifest.dump(1);
    EXPECT_EQ(joule::trainer::verify_checkpoint(gap), "");
    joule::models::BertForPreTraining m(model_config(), 13);
    auto o = joule::trainer::create_optimizer({}, m->hf_named_parameters());
    try {
      joule::trainer::load_checkpoint(gap, m, *o, 0, world);
      ADD_FAILURE() << "a checkpoint missing a shard loaded";
    } catch (const joule::trainer::CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find("in none of its files (a shard missing)"), std::string::npos) << e.what();
    }
  }
  comm.barrier();
  if (rank == 0) fs::remove_all(root);
}
