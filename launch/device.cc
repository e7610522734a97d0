#include "launch/device.h"

#include <cstdlib>

#include "launch/torch_compat.h"

namespace joule::launch {

std::string communicator_backend(DeviceKind kind) { return kind == DeviceKind::cuda ? "nccl" : "mpi"; }

void require_device(DeviceKind kind) {
  if (kind != DeviceKind::cuda) return;
  if (!compat::built_with_cuda()) compat::no_cuda("--device cuda");
  if (compat::cuda_device_count() == 0)
    throw DeviceError(
        "--device cuda: no GPU is visible to this process (CUDA_VISIBLE_DEVICES=" +
            std::string(std::getenv("CUDA_VISIBLE_DEVICES") ? std::getenv("CUDA_VISIBLE_DEVICES") : "(unset)") + ")",
        "run on a GPU node (srun --gpus-per-node, or mpirun on the GPU hosts), or train with --device cpu");
}

DeviceChoice choose_device(DeviceKind kind, int local_rank) {
  DeviceChoice c;
  if (kind != DeviceKind::cuda) {
    c.description = kind == DeviceKind::trainium_sim ? "cpu (trainium-sim: the numerics run on this CPU)" : "cpu";
    return c;
  }
  require_device(kind);
  const int visible = compat::cuda_device_count();
  const int index = local_rank % visible;
  compat::set_cuda_device(index);
  c.device = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
  c.pci_bus_id = compat::cuda_pci_bus_id(index);
  c.description = "cuda:" + std::to_string(index) + " (" + compat::cuda_device_name(index) + "; " +
                  std::to_string(visible) + " GPU(s) visible)";
  return c;
}

}  // namespace joule::launch
