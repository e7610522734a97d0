// The shard validator on shards built from the fuzzer's bytes (structure-aware: the bytes choose the
// shape, which datasets are missing, their HDF5 types and ranks, and every value), written as real
// HDF5 files. validate_shard must throw ShardError or accept a shard whose values ShardReader reads
// back inside the documented bounds. Raw bytes are not fed to the HDF5 library itself: it is not
// ours, not instrumented, and not hardened against hostile files.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "data/shard.h"
#include "tests/support/shard_variants.h"

namespace d = joule::data;

namespace {

class Bytes {
 public:
  Bytes(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  uint8_t next() { return pos_ < size_ ? data_[pos_++] : 0; }
  int32_t value() {  // mostly small, sometimes extreme
    const uint8_t kind = next();
    if (kind < 200) return next() % 40 - 4;
    if (kind < 230) return static_cast<int32_t>(next() | next() << 8 | next() << 16 | next() << 24);
    return kind < 245 ? INT32_MAX : INT32_MIN;
  }

 private:
  const uint8_t* data_;
  size_t size_, pos_ = 0;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // One scratch file per process, in TMPDIR (run.sh gives each harness its own), removed at exit.
  static const std::string path = [] {
    static std::string p =
        (std::filesystem::temp_directory_path() / ("joule-fuzz-shard-" + std::to_string(getpid()) + ".hdf5")).string();
    std::atexit([] { std::remove(p.c_str()); });
    return p;
  }();
  Bytes in(data, size);
  const hsize_t rows = in.next() % 6, len = in.next() % 9 + 1, preds = in.next() % 4 + 1;
  const int64_t vocab = in.next() % 40;
  const hsize_t widths[6] = {len, len, len, preds, preds, 0};
  // Per dataset: 0-3 int32 as expected, 4 missing, 5 float, 6 one dimension less, 7 one row more, 8 int64, 9 int8.
  int mode[6];
  for (int& m : mode) m = in.next() % 10;
  {
    d::Hdf5Handle f(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
    if (!f.valid()) std::abort();
    for (int c = 0; c < 6; ++c) {
      if (mode[c] == 4) continue;
      std::vector<hsize_t> dims = {rows + (mode[c] == 7 ? 1 : 0)};
      if (widths[c] > 0 && mode[c] != 6) dims.push_back(widths[c]);
      hsize_t count = 1;
      for (hsize_t x : dims) count *= x;
      std::vector<int64_t> values(count);
      for (auto& v : values) v = in.value();
      std::vector<float> floats(values.begin(), values.end());
      const char* name = d::kShardDatasets[c];
      if (mode[c] == 5)
        joule::test::add_dataset(f.get(), name, H5T_IEEE_F32LE, dims, floats.data(), H5T_NATIVE_FLOAT);
      else if (mode[c] == 8)
        joule::test::add_dataset(f.get(), name, H5T_STD_I64LE, dims, values.data(), H5T_NATIVE_INT64);
      else if (mode[c] == 9) {
        std::vector<int8_t> small(values.begin(), values.end());
        joule::test::add_dataset(f.get(), name, H5T_STD_I8LE, dims, small.data(), H5T_NATIVE_INT8);
      } else {
        std::vector<int32_t> ints(values.begin(), values.end());
        joule::test::add_dataset(f.get(), name, H5T_STD_I32LE, dims, ints.data(), H5T_NATIVE_INT32);
      }
    }
  }
  d::ShardStats stats;
  try {
    stats = d::validate_shard(path, vocab);
  } catch (const d::ShardError&) {
    return 0;
  }
  // Accepted: the documented invariants must hold for every value read back.
  d::ShardReader reader(path);
  d::HostBatch b;
  reader.read_range(0, reader.sequences(), b);
  if (stats.sequences <= 0 || b.rows != stats.sequences) std::abort();
  for (size_t i = 0; i < b.input_ids.size(); ++i) {
    if (b.input_ids[i] < 0 || (vocab > 0 && b.input_ids[i] >= vocab)) std::abort();
    if ((b.input_mask[i] | 1) != 1 || (b.segment_ids[i] | 1) != 1) std::abort();
  }
  // Every position inside the sequence; the ids of the used prediction slots (up to each row's first position 0,
  // the model's rule) inside the vocabulary: ids in unused slots are never read.
  for (int64_t r = 0; r < b.rows; ++r) {
    bool used = true;
    for (int64_t p = 0; p < b.max_predictions; ++p) {
      const size_t i = static_cast<size_t>(r * b.max_predictions + p);
      if (b.masked_positions[i] < 0 || b.masked_positions[i] >= b.seq_len) std::abort();
      used = used && b.masked_positions[i] != 0;
      if (used && (b.masked_ids[i] < 0 || (vocab > 0 && b.masked_ids[i] >= vocab))) std::abort();
    }
  }
  for (int32_t label : b.next_sentence_labels)
    if ((label | 1) != 1) std::abort();
  return 0;
}
