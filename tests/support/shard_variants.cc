#include "tests/support/shard_variants.h"

#include "data/hdf5.h"

namespace joule::test {

data::HostBatch small_batch(int64_t rows, int64_t len, int64_t preds, int32_t first_id) {
  data::HostBatch b;
  b.resize(rows, len, preds);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < len; ++i) {
      b.input_ids[r * len + i] = static_cast<int32_t>(first_id + r + i);
      b.input_mask[r * len + i] = i < len - 1 ? 1 : 0;
      b.segment_ids[r * len + i] = i >= len / 2 ? 1 : 0;
    }
    b.masked_positions[r * preds] = 1;
    b.masked_positions[r * preds + 1] = 3;
    b.masked_ids[r * preds] = 7;
    b.masked_ids[r * preds + 1] = 8;
    b.next_sentence_labels[r] = static_cast<int32_t>(r % 2);
  }
  return b;
}

void add_dataset(hid_t file, const char* name, hid_t type, const std::vector<hsize_t>& dims, const void* data,
                 hid_t mem_type) {
  data::Hdf5Handle space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr));
  data::Hdf5Handle ds(H5Dcreate2(file, name, type, space.get(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  if (!ds.valid() || H5Dwrite(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data) < 0)
    throw std::runtime_error(std::string("add_dataset: cannot write '") + name + "'");
}

void write_variant(const std::string& path, const data::HostBatch& b, const std::string& replace,
                   const std::function<void(hid_t)>& replacement) {
  data::Hdf5Handle f(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT));
  if (!f.valid()) throw std::runtime_error(path + ": cannot create");
  const std::vector<int32_t>* cols[] = {&b.input_ids,        &b.input_mask, &b.segment_ids,
                                        &b.masked_positions, &b.masked_ids, &b.next_sentence_labels};
  for (int c = 0; c < 6; ++c) {
    const std::string name = data::kShardDatasets[c];
    if (name == replace) {
      if (replacement) replacement(f.get());
      continue;
    }
    std::vector<hsize_t> dims = {static_cast<hsize_t>(b.rows)};
    if (c < 3)
      dims.push_back(static_cast<hsize_t>(b.seq_len));
    else if (c < 5)
      dims.push_back(static_cast<hsize_t>(b.max_predictions));
    add_dataset(f.get(), name.c_str(), H5T_STD_I32LE, dims, cols[c]->data(), H5T_NATIVE_INT32);
  }
}

}  // namespace joule::test
