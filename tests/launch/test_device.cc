// The device seam (launch/device.h) on a machine without a GPU: cpu and trainium-sim resolve to the CPU, and cuda is
// refused before anything starts, saying whether the build or the machine lacks CUDA.
#include <gtest/gtest.h>

#include <string>

#include "launch/device.h"
#include "launch/torch_compat.h"

namespace joule::launch {
namespace {

TEST(Device, CpuAndTrainiumSimComputeOnTheCpu) {
  for (const DeviceKind kind : {DeviceKind::cpu, DeviceKind::trainium_sim}) {
    const DeviceChoice c = choose_device(kind, /*local_rank=*/3);
    EXPECT_TRUE(c.device.is_cpu()) << device_name(kind);
    EXPECT_EQ(c.cuda_index(), -1);
    EXPECT_EQ(communicator_backend(kind), "mpi");
    EXPECT_NO_THROW(require_device(kind));
  }
  EXPECT_EQ(communicator_backend(DeviceKind::cuda), "nccl");
}

TEST(Device, CudaIsRefusedClearlyWithoutAGpu) {
  if (compat::cuda_device_count() > 0) GTEST_SKIP() << "this machine has a GPU";
  try {
    require_device(DeviceKind::cuda);
    FAIL() << "--device cuda was accepted without a GPU";
  } catch (const DeviceError& e) {
    const std::string what = e.what();
    if (compat::built_with_cuda())
      EXPECT_NE(what.find("no GPU is visible"), std::string::npos) << what;
    else
      EXPECT_NE(what.find("built against a LibTorch without CUDA"), std::string::npos) << what;
    EXPECT_NE(e.hint().find("--device cpu"), std::string::npos) << e.hint();
  }
  EXPECT_THROW(choose_device(DeviceKind::cuda, 0), DeviceError);
}

TEST(Device, CpuStreamIsNullAndSynchronizeIsANoOp) {
  EXPECT_EQ(compat::current_stream(torch::Device(torch::kCPU)), nullptr);
  EXPECT_NO_THROW(compat::synchronize(torch::Device(torch::kCPU)));
}

}  // namespace
}  // namespace joule::launch
