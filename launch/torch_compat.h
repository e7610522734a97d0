// Every place where joule's source depends on which LibTorch it is built against: Debian's 1.13 (CPU only) or a
// 2.x with CUDA (PyPI's wheel, the GPU machines' image). Nothing else in joule names a LibTorch version or a CUDA
// header; a difference found later goes here, beside the others.
//
// JOULE_TORCH_CUDA is defined by CMake when the LibTorch found has CUDA libraries (c10_cuda). Without it every CUDA
// function below refuses with a DeviceError, so that `--device cuda` fails clearly at run time rather than at link
// time.
#pragma once

#include <cstdint>
#include <string>
#include <utility>

#include <torch/torch.h>

#include "launch/util/error.h"

namespace joule::launch {

// --device cuda on a LibTorch or machine that cannot run it.
class DeviceError : public joule::Error {
 public:
  DeviceError(const std::string& message, const std::string& hint) : joule::Error(message, hint) {}
};

namespace compat {

// What torch::autograd::impl::grad_accumulator returns: a std::shared_ptr<Node> in 1.13, a c10::intrusive_ptr<Node>
// in 2.x.
using GradAccumulatorPtr = decltype(torch::autograd::impl::grad_accumulator(std::declval<const torch::Tensor&>()));

// True when this build of joule was compiled against a LibTorch with CUDA.
bool built_with_cuda();
// Throws the DeviceError of a build without CUDA, for `what` ("--device cuda").
[[noreturn]] void no_cuda(const std::string& what);
// GPUs visible to this process (0 without CUDA).
int cuda_device_count();
// Makes `index` this thread's current CUDA device.
void set_cuda_device(int index);
// "NVIDIA H200" (CUDA device properties).
std::string cuda_device_name(int index);
// The device's PCI bus id, "00000000:3B:00.0" (cudaDeviceGetPCIBusId): how NVML finds the same GPU.
std::string cuda_pci_bus_id(int index);
// The CUDA stream work on `device` is queued on now, as an opaque cudaStream_t; nullptr for the CPU.
void* current_stream(const torch::Device& device);
// Waits until the device has finished its queued work (no-op on the CPU).
void synchronize(const torch::Device& device);
// The highest number of bytes the caching allocator had allocated on the CUDA device since the start or the last
// reset, and the reset.
int64_t cuda_peak_allocated_bytes(int index);
void reset_cuda_peak(int index);
// softmax(q k^T * scale + mask) v, with dropout p on the probabilities, as one fused kernel
// (at::scaled_dot_product_attention, LibTorch 2.x: no [B, heads, L, L] tensor in memory); q, k, v
// [B, heads, L, head_dim] on a GPU, mask in their dtype and broadcastable to [B, heads, L, L]; the dropout draws from
// the device's default generator. Refuses without CUDA (joule calls it on GPUs only; 1.13 has no such kernel, and its
// `scale` argument needs LibTorch 2.1 or later).
torch::Tensor fused_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                              const torch::Tensor& mask, double dropout_p, double scale);
// The default generator of `device` (torch's global one: CPU or the CUDA device's), reseeded to `seed` under its
// lock; device dropout draws from it after the seed came from the CPU generator that checkpoints save.
void reseed_default_generator(const torch::Device& device, uint64_t seed);

}  // namespace compat
}  // namespace joule::launch
