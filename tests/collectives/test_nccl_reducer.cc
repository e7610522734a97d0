// The trainer's use of the nccl backend, on GPUs (built with JOULE_WITH_NCCL; skipped where no GPU is visible, as on
// the build machines): buffers written on the current stream just before the collective (which must wait for them
// through its event), host buffers over the MPI bootstrap, and the gradient reducer with its buckets on the GPU
// giving the gradients of one process on the same batch. At one rank NCCL's collectives are copies; at 2 and 4
// ranks (one GPU each) they are the same closed forms.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <vector>

#include "collectives/communicator.h"
#include "collectives/reducer.h"
#include "launch/torch_compat.h"
#include "models/bert.h"
#include "tests/support/test_util.h"

using namespace joule::collectives;

namespace {

// One GPU per rank on this node (NCCL cannot put two ranks of one communicator on one GPU).
bool have_gpu() {
  const char* local_size = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  return joule::launch::compat::cuda_device_count() >= (local_size ? std::atoi(local_size) : 1);
}

// One communicator for the suite, never destroyed: a static's destructor would run ncclCommDestroy after main's
// MPI_Finalize, while the CUDA runtime tears down.
Communicator& nccl() {
  static Communicator* c = create_communicator("nccl").release();
  return *c;
}

torch::Device this_ranks_gpu() {
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(nccl().info().local_rank %
                                                                   joule::launch::compat::cuda_device_count()));
}

// One process's gradients on the CPU (the reference), and the same model on this rank's GPU after one synchronizing
// backward through a reducer with `shard` (the same batch on every rank).
struct GpuBackward {
  joule::models::BertForPreTraining reference{nullptr}, model{nullptr};
  std::unique_ptr<GradientReducer> reducer;
};
GpuBackward gpu_backward(bool shard) {
  const auto config = joule::test::small_bert(300, 32, 2, 64, 32, /*dropout=*/0.0);
  const auto batch = joule::models::synthetic_batch(config, 4, 16, 3, 77);
  GpuBackward g;
  g.reference = joule::models::BertForPreTraining(config, 5);
  g.reference->forward(batch).loss.backward();
  g.model = joule::models::BertForPreTraining(config, 5);
  g.model->to(this_ranks_gpu());
  ReducerOptions o;
  o.bucket_bytes = 20000;
  o.first_bucket_bytes = 4000;
  o.shard = shard;
  g.reducer = std::make_unique<GradientReducer>(g.model->hf_named_parameters(), nccl(), o);
  g.reducer->broadcast_parameters(0);
  g.reducer->zero_grad();
  g.reducer->begin_micro_batch(true);
  g.model->forward(batch).loss.backward();  // the batch is on the host: forward copies it over
  g.reducer->finish();
  return g;
}

}  // namespace

TEST(NcclTrainer, StreamOrderedDeviceBuffersAndHostBuffers) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU visible";
  const int n = nccl().info().world_size, r = nccl().info().rank;
  const torch::Device gpu = this_ranks_gpu();
  // Written on the current stream just before: the all-reduce must wait for it.
  torch::Tensor v = torch::full({1 << 20}, static_cast<float>(r + 1), torch::TensorOptions().device(gpu));
  nccl().all_reduce(buffer_of(v))->wait();
  EXPECT_EQ(v.min().item<float>(), n * (n + 1) / 2.0f);
  EXPECT_EQ(v.max().item<float>(), n * (n + 1) / 2.0f);
  torch::Tensor b = torch::full({33}, r == 0 ? 7.0 : -1.0, torch::TensorOptions().dtype(torch::kFloat64).device(gpu));
  nccl().broadcast(buffer_of(b), 0)->wait();
  EXPECT_EQ(b.min().item<double>(), 7.0);
  // Host buffers (the trainer's step boundaries) go over MPI.
  std::vector<double> host(3, 1.0);
  sum_over_ranks(nccl(), host);
  EXPECT_EQ(host[2], n);
}

TEST(NcclTrainer, ReducerOnTheGpuGivesOneProcesssGradients) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU visible";
  const GpuBackward g = gpu_backward(false);
  const auto want = g.reference->hf_named_parameters();
  const auto got = g.model->hf_named_parameters();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_TRUE(got[i].second.grad().is_cuda()) << got[i].first;
    // Every rank computed the same batch: the average is one process's gradient (GPU vs CPU arithmetic).
    EXPECT_TRUE(torch::allclose(got[i].second.grad().cpu(), want[i].second.grad(), 1e-3, 1e-5)) << got[i].first;
  }
}

// ZeRO-1 on the GPU: the buckets reduce-scattered in place (each rank keeps its block of the averaged gradients) and
// the parameters all-gathered in place; a block changed on its own rank reaches every rank.
TEST(NcclTrainer, ShardedReducerScattersGradientsAndGathersParameters) {
  if (!have_gpu()) GTEST_SKIP() << "no GPU visible";
  const int r = nccl().info().rank;
  GpuBackward g = gpu_backward(true);
  const auto want = g.reference->hf_named_parameters();
  auto got = g.model->hf_named_parameters();
  const auto& ranges = g.reducer->shard_ranges();
  for (size_t i = 0; i < got.size(); ++i) {
    if (ranges[i].size() == 0) continue;
    const auto mine = got[i].second.grad().reshape({-1}).narrow(0, ranges[i].begin, ranges[i].size()).cpu();
    const auto expected = want[i].second.grad().reshape({-1}).narrow(0, ranges[i].begin, ranges[i].size());
    EXPECT_TRUE(torch::allclose(mine, expected, 1e-3, 1e-5)) << got[i].first;
  }
  // Each rank writes rank + 1 into its ranges; after the gather every element holds its owner's rank + 1.
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < got.size(); ++i)
      if (ranges[i].size() > 0)
        got[i].second.view({-1}).narrow(0, ranges[i].begin, ranges[i].size()).fill_(static_cast<float>(r + 1));
  }
  g.reducer->gather_parameters();
  double low = 1e9, high = 0;
  for (const auto& [name, p] : got) {
    low = std::min(low, p.min().item<double>());
    high = std::max(high, p.max().item<double>());
  }
  EXPECT_EQ(low, 1.0);
  EXPECT_EQ(high, static_cast<double>(nccl().info().world_size));
}
