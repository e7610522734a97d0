// Shards for tests: a small well-formed batch, and shards that break NVIDIA's layout in one chosen way, written with
// raw HDF5 calls (for the schema unit tests, the end-to-end bad-input table (make_bad_shard) and the shard fuzzer).
#pragma once

#include <hdf5.h>

#include <functional>
#include <string>
#include <vector>

#include "data/shard.h"

namespace joule::test {

// `rows` sequences of `len` tokens with `preds` prediction slots: token ids first_id + row + position, the last
// position padding, two masked predictions per row (ids 7 and 8), alternating next-sentence labels.
data::HostBatch small_batch(int64_t rows = 5, int64_t len = 8, int64_t preds = 3, int32_t first_id = 10);

// One contiguous dataset `name` of file type `type` and shape `dims`, from `data` in memory type `mem_type`.
void add_dataset(hid_t file, const char* name, hid_t type, const std::vector<hsize_t>& dims, const void* data,
                 hid_t mem_type);

// Writes `batch` as a shard of int32 datasets, except the dataset named `replace`: `replacement` writes it
// instead, or it is left out when `replacement` is empty.
void write_variant(const std::string& path, const data::HostBatch& batch, const std::string& replace,
                   const std::function<void(hid_t)>& replacement);

}  // namespace joule::test
