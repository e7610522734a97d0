#include "launch/torch_compat.h"

#include <mutex>

#include <ATen/Context.h>

#ifdef JOULE_TORCH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace joule::launch::compat {

void no_cuda(const std::string& what) {
  throw DeviceError(what + ": this joule was built against a LibTorch without CUDA (Debian's libtorch is CPU-only)",
                    "build joule against a CUDA LibTorch (docs/cluster.md, \"GPUs\"), or train with --device cpu");
}

bool built_with_cuda() {
#ifdef JOULE_TORCH_CUDA
  return true;
#else
  return false;
#endif
}

#ifdef JOULE_TORCH_CUDA

int cuda_device_count() { return static_cast<int>(c10::cuda::device_count()); }

void set_cuda_device(int index) { c10::cuda::set_device(static_cast<c10::DeviceIndex>(index)); }

std::string cuda_device_name(int index) { return at::cuda::getDeviceProperties(index)->name; }

std::string cuda_pci_bus_id(int index) {
  char id[32] = {};
  C10_CUDA_CHECK(cudaDeviceGetPCIBusId(id, sizeof id, index));
  return id;
}

void* current_stream(const torch::Device& device) {
  if (!device.is_cuda()) return nullptr;
  return c10::cuda::getCurrentCUDAStream(device.index()).stream();
}

void synchronize(const torch::Device& device) {
  if (device.is_cuda()) c10::cuda::device_synchronize();
}

// 1.13 and 2.x both index the statistics by StatType with AGGREGATE = 0; the enum's namespace moved in 2.x.
int64_t cuda_peak_allocated_bytes(int index) {
  return c10::cuda::CUDACachingAllocator::getDeviceStats(static_cast<c10::DeviceIndex>(index)).allocated_bytes[0].peak;
}

void reset_cuda_peak(int index) {
  c10::cuda::CUDACachingAllocator::resetPeakStats(static_cast<c10::DeviceIndex>(index));
}

torch::Tensor fused_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& mask, double dropout_p, double scale) {
  return at::scaled_dot_product_attention(q, k, v, mask, dropout_p, /*is_causal=*/false, scale);
}

#else

int cuda_device_count() { return 0; }
void set_cuda_device(int) { no_cuda("set_cuda_device"); }
std::string cuda_device_name(int) { no_cuda("cuda_device_name"); }
std::string cuda_pci_bus_id(int) { no_cuda("cuda_pci_bus_id"); }
void* current_stream(const torch::Device& device) {
  if (device.is_cuda()) no_cuda("current_stream");
  return nullptr;
}
void synchronize(const torch::Device& device) {
  if (device.is_cuda()) no_cuda("synchronize");
}
int64_t cuda_peak_allocated_bytes(int) { no_cuda("cuda_peak_allocated_bytes"); }
void reset_cuda_peak(int) { no_cuda("reset_cuda_peak"); }
torch::Tensor fused_attention(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&, const torch::Tensor&,
                              double, double) {
  no_cuda("fused_attention");
}

#endif

void reseed_default_generator(const torch::Device& device, uint64_t seed) {
  at::Generator generator = at::globalContext().defaultGenerator(device);
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_current_seed(seed);
}

}  // namespace joule::launch::compat
