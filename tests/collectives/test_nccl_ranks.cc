// The nccl backend at the launcher's rank count (2 and 4 under ctest), one GPU per rank: the same closed forms as
// the mpi suite (rank r contributes r + 1; sums n(n+1)/2), so a backend that did nothing would fail. Skipped, with
// the reason, where fewer GPUs are visible than ranks on this node (CI machines have none; NCCL cannot put two
// ranks of one communicator on one GPU).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "collectives/communicator.h"

using namespace joule::collectives;

namespace {

// A device buffer of `n` floats holding `values`, copied back by `read()`.
struct DeviceFloats {
  explicit DeviceFloats(const std::vector<float>& values) : n(values.size()) {
    if (cudaMalloc(&ptr, n * sizeof(float)) != cudaSuccess) throw std::runtime_error("cudaMalloc failed");
    cudaMemcpy(ptr, values.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  }
  ~DeviceFloats() { cudaFree(ptr); }
  Buffer buffer(int device) const { return {ptr, n, DType::kFloat32, device}; }
  std::vector<float> read() const {
    std::vector<float> out(n);
    cudaMemcpy(out.data(), ptr, n * sizeof(float), cudaMemcpyDeviceToHost);
    return out;
  }
  float* ptr = nullptr;
  size_t n;
};

}  // namespace

TEST(NcclAtRanks, ClosedFormsOfEveryCollective) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  const char* local_size = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int ranks_here = local_size ? std::atoi(local_size) : 1;
  if (devices < ranks_here)
    GTEST_SKIP() << "nccl at " << ranks_here << " ranks on this node needs " << ranks_here << " GPUs; " << devices
                 << " visible";
  auto comm = create_communicator("nccl");
  const int n = comm->info().world_size, r = comm->info().rank;
  int device = 0;
  cudaGetDevice(&device);
  const float sum = n * (n + 1) / 2.0f;

  DeviceFloats a(std::vector<float>(1000, static_cast<float>(r + 1)));
  comm->all_reduce(a.buffer(device))->wait();
  for (float x : a.read()) ASSERT_EQ(x, sum);

  DeviceFloats avg(std::vector<float>(7, static_cast<float>(r + 1)));
  CollectiveOptions average;
  average.op = ReduceOp::kAverage;
  comm->all_reduce(avg.buffer(device), average)->wait();
  for (float x : avg.read()) ASSERT_FLOAT_EQ(x, sum / n);

  const int root = n > 1 ? 1 : 0;  // not rank 0 where there is another (one GPU: rank 0 is the only root)
  DeviceFloats b(std::vector<float>(5, static_cast<float>(r == root ? 42 : r)));
  comm->broadcast(b.buffer(device), root)->wait();
  for (float x : b.read()) ASSERT_EQ(x, 42.0f);

  DeviceFloats in(std::vector<float>(3, static_cast<float>(r)));
  DeviceFloats gathered(std::vector<float>(3 * static_cast<size_t>(n), -1));
  comm->all_gather(gathered.buffer(device), in.buffer(device))->wait();
  const auto g = gathered.read();
  for (int k = 0; k < n; ++k)
    for (int i = 0; i < 3; ++i) ASSERT_EQ(g[static_cast<size_t>(k * 3 + i)], static_cast<float>(k));

  std::vector<float> blocks(2 * static_cast<size_t>(n));
  for (size_t i = 0; i < blocks.size(); ++i) blocks[i] = static_cast<float>(i / 2 + r);  // block k holds k + r
  DeviceFloats scatter_in(blocks), scatter_out(std::vector<float>(2, -1));
  comm->reduce_scatter(scatter_out.buffer(device), scatter_in.buffer(device))->wait();
  for (float x : scatter_out.read())
    ASSERT_EQ(x, static_cast<float>(n * r) + n * (n - 1) / 2.0f);  // sum over k' of (r + k')
}
