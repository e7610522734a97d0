// The safetensors header parser on arbitrary bytes: it must either throw FormatError or return a header
// whose every tensor lies inside the file, matches its shape and dtype, and does not overlap another.
#include <cstdint>
#include <cstdlib>

#include "models/safetensors.h"

namespace st = joule::models::safetensors;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  st::Header h;
  try {
    h = st::parse(data, size, "fuzz.safetensors");
  } catch (const st::FormatError&) {
    return 0;
  }
  const uint64_t data_bytes = size - h.data_start;
  uint64_t previous_end = 0;
  for (const st::TensorInfo& t : h.tensors) {
    if (h.data_start > size || t.begin > t.end || t.end > data_bytes || t.begin < previous_end) std::abort();
    if (t.bytes() != static_cast<uint64_t>(t.numel()) * st::dtype_bytes(t.dtype)) std::abort();
    previous_end = t.end;
  }
  return 0;
}
