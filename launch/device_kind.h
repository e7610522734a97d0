// The kinds of device a rank computes on (train.device, --device), held as an enum parsed once at the door. No
// LibTorch: the run config names it (launch/device.h resolves it to a torch::Device).
#pragma once

#include <string>
#include <vector>

namespace joule::launch {

enum class DeviceKind { cpu, cuda, trainium_sim };
// The words of train.device and --device, in DeviceKind's order.
inline const std::vector<std::string> kDeviceWords = {"cpu", "cuda", "trainium-sim"};
inline const std::string& device_name(DeviceKind d) { return kDeviceWords.at(static_cast<size_t>(d)); }

}  // namespace joule::launch
