// The device a rank computes on (train.device, --device): "cpu"; "trainium-sim", whose numerics also run on this
// CPU (its cluster's clock is simulated); or "cuda", one GPU per rank: the rank's local rank modulo the GPUs its
// node shows it, as the nccl communicator picks. Model, batches, gradient buckets and optimizer state live there.
#pragma once

#include <string>

#include <torch/torch.h>

#include "launch/device_kind.h"

namespace joule::launch {

struct DeviceChoice {
  torch::Device device{torch::kCPU};
  std::string description;  // "cpu", "cuda:1 (NVIDIA H200; 8 GPUs visible)"
  std::string pci_bus_id;   // a GPU's, for NVML (launch/torch_compat.h); empty on the CPU
  int cuda_index() const { return device.is_cuda() ? device.index() : -1; }
};

// The communicator backend of a device: "nccl" for cuda, "mpi" otherwise.
std::string communicator_backend(DeviceKind kind);

// Checks, before anything else starts, that this build and machine can run `kind`: cuda needs a LibTorch with
// CUDA and at least one visible GPU. Throws DeviceError naming what is missing and what to do.
void require_device(DeviceKind kind);

// The device of the rank with `local_rank` on its node; a CUDA device is made the current one.
DeviceChoice choose_device(DeviceKind kind, int local_rank);

}  // namespace joule::launch
