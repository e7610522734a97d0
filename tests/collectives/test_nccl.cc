// The nccl backend on one process: skipped where no GPU is visible (as on CI machines); where one is,
// all_reduce and broadcast on device memory; host buffers over the MPI bootstrap; a host/device mix refused.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <vector>

#include "collectives/communicator.h"

using namespace joule::collectives;

TEST(Nccl, SingleRankCollectivesOnTheGpu) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) GTEST_SKIP() << "no CUDA device visible";
  auto comm = create_communicator("nccl");
  EXPECT_EQ(comm->backend(), "nccl");
  EXPECT_EQ(comm->info().world_size, 1);
  std::vector<float> host(1 << 20, 2.5f);
  float* dev = nullptr;
  ASSERT_EQ(cudaMalloc(&dev, host.size() * 4), cudaSuccess);
  ASSERT_EQ(cudaMemcpy(dev, host.data(), host.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
  CollectiveOptions avg;
  avg.op = ReduceOp::kAverage;
  comm->all_reduce({dev, host.size(), DType::kFloat32, 0})->wait();
  comm->all_reduce({dev, host.size(), DType::kFloat32, 0}, avg)->wait();
  comm->broadcast({dev, host.size(), DType::kFloat32, 0}, 0)->wait();
  std::vector<float> back(host.size());
  ASSERT_EQ(cudaMemcpy(back.data(), dev, back.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
  for (float x : back) ASSERT_EQ(x, 2.5f);  // one rank: sum and average leave the values
  comm->all_reduce({host.data(), host.size(), DType::kFloat32, -1})->wait();  // over MPI
  EXPECT_EQ(host[0], 2.5f);
  EXPECT_THROW(comm->all_gather({dev, host.size(), DType::kFloat32, 0}, {host.data(), 1, DType::kFloat32, -1}),
               CollectiveError);
  cudaFree(dev);
}

TEST(Nccl, BackendIsRegisteredInThisBuild) {
  const auto names = available_backends();
  EXPECT_NE(std::find(names.begin(), names.end(), "nccl"), names.end());  // this file is built only with NCCL
}
