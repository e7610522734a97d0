// The 16-bit patterns of a contiguous bf16 CPU tensor: what the kernels of models/cpu_vector.h read and write.
#pragma once

#include <cstdint>

#include <ATen/core/Tensor.h>
#include <c10/util/BFloat16.h>

namespace joule::models::cpu {

inline const uint16_t* bf16_bits(const at::Tensor& t) {
  return reinterpret_cast<const uint16_t*>(t.data_ptr<c10::BFloat16>());
}
inline uint16_t* bf16_bits(at::Tensor& t) { return reinterpret_cast<uint16_t*>(t.data_ptr<c10::BFloat16>()); }

}  // namespace joule::models::cpu
