// A zlib-format (RFC 1950/1951) encoder for shard columns: literals and runs only (matches at distance 1), in one
// dynamic-Huffman block. A shard's 64-row chunks are mostly runs (the zero high bytes of int32 ids, the padding, the
// input mask and segment ids) around near-random token bytes, where a general match finder spends its time without
// finding much: on `joule data create`'s output this writes streams about 5 % larger than libdeflate's level 4 at
// several times its speed. Any inflater reads them (HDF5's deflate filter, zlib, h5py). No LibTorch here.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace joule::data {

// Compresses in[0, size) into `out` (resized to the stream's length) as one zlib stream. size < 4 GiB.
void zlib_compress_runs(const uint8_t* in, size_t size, std::string& out);

}  // namespace joule::data
