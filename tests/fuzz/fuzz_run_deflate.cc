// joule's deflate encoder for shard chunks on arbitrary bytes, and on the same bytes read as (byte, run length)
// pairs, so that runs far longer than libFuzzer's inputs are tried: every stream inflates (libdeflate) to its input.
#include <libdeflate.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "data/run_deflate.h"

namespace {

void round_trip(const std::vector<uint8_t>& in) {
  static libdeflate_decompressor* inflater = libdeflate_alloc_decompressor();
  std::string stream;
  joule::data::zlib_compress_runs(in.data(), in.size(), stream);
  std::vector<uint8_t> out(in.size() + 1);
  size_t out_size = 0;
  if (libdeflate_zlib_decompress(inflater, stream.data(), stream.size(), out.data(), out.size(), &out_size) !=
      LIBDEFLATE_SUCCESS)
    std::abort();
  out.resize(out_size);
  if (out != in) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  round_trip(std::vector<uint8_t>(data, data + size));
  std::vector<uint8_t> runs;
  for (size_t i = 0; i + 1 < size && runs.size() < (1u << 20); i += 2)
    runs.insert(runs.end(), size_t{data[i + 1]} * 8 + 1, data[i]);
  round_trip(runs);
  return 0;
}
