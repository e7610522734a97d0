// make_bad_shard KIND GOOD_SHARD OUT: a copy of GOOD_SHARD broken in one way, for the bad-input table
// (tests/e2e/bad_inputs.sh). KIND: missing-dataset, wrong-dtype, wrong-shape, ids-beyond-vocab,
// positions-beyond-seq-len, empty, no-predictions (rows without a masked position), zero-rows (all-zero rows
// appended, as a pre-allocated shard never filled), unknown-filter (a compression filter HDF5 does not have).
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "data/shard.h"
#include "tests/support/shard_variants.h"

int main(int argc, char** argv) {
  if (argc != 4) {
    std::cerr << "usage: make_bad_shard KIND GOOD_SHARD OUT\n";
    return 2;
  }
  const std::string kind = argv[1], out = argv[3];
  joule::data::HostBatch b;
  {
    joule::data::ShardReader reader(argv[2]);
    reader.read_range(0, reader.sequences(), b);
  }
  const hsize_t n = static_cast<hsize_t>(b.rows), len = static_cast<hsize_t>(b.seq_len);
  using joule::test::add_dataset;
  if (kind == "missing-dataset") {
    joule::test::write_variant(out, b, "masked_lm_ids", nullptr);
  } else if (kind == "wrong-dtype") {
    std::vector<float> ids(b.input_ids.begin(), b.input_ids.end());
    joule::test::write_variant(out, b, "input_ids", [&](hid_t f) {
      add_dataset(f, "input_ids", H5T_IEEE_F32LE, {n, len}, ids.data(), H5T_NATIVE_FLOAT);
    });
  } else if (kind == "wrong-shape") {
    joule::test::write_variant(out, b, "input_ids", [&](hid_t f) {
      add_dataset(f, "input_ids", H5T_STD_I32LE, {n * len}, b.input_ids.data(), H5T_NATIVE_INT32);
    });
  } else if (kind == "ids-beyond-vocab") {
    b.input_ids[b.input_ids.size() / 2] = 1000000;
    joule::test::write_variant(out, b, "", nullptr);
  } else if (kind == "positions-beyond-seq-len") {
    b.masked_positions[b.masked_positions.size() / 2] = static_cast<int32_t>(len);
    joule::test::write_variant(out, b, "", nullptr);
  } else if (kind == "no-predictions") {
    for (int64_t r = 0; r < b.rows; r += 2)
      for (int64_t k = 0; k < b.max_predictions; ++k)
        b.masked_positions[r * b.max_predictions + k] = b.masked_ids[r * b.max_predictions + k] = 0;
    joule::test::write_variant(out, b, "", nullptr);
  } else if (kind == "zero-rows") {
    const int64_t real = b.rows;
    joule::data::HostBatch padded;
    padded.resize(real * 3, b.seq_len, b.max_predictions);  // zero-filled
    std::copy(b.input_ids.begin(), b.input_ids.end(), padded.input_ids.begin());
    std::copy(b.input_mask.begin(), b.input_mask.end(), padded.input_mask.begin());
    std::copy(b.segment_ids.begin(), b.segment_ids.end(), padded.segment_ids.begin());
    std::copy(b.masked_positions.begin(), b.masked_positions.end(), padded.masked_positions.begin());
    std::copy(b.masked_ids.begin(), b.masked_ids.end(), padded.masked_ids.begin());
    std::copy(b.next_sentence_labels.begin(), b.next_sentence_labels.end(), padded.next_sentence_labels.begin());
    joule::data::write_shard(out, padded);
  } else if (kind == "unknown-filter") {
    // As h5py's lzf: filter 32000 in the pipeline (optional, so HDF5 writes without it and records it).
    joule::test::write_variant(out, b, "input_ids", [&](hid_t f) {
      joule::data::Hdf5Handle space(H5Screate_simple(2, std::vector<hsize_t>{n, len}.data(), nullptr));
      joule::data::Hdf5Handle plist(H5Pcreate(H5P_DATASET_CREATE));
      const hsize_t chunk[2] = {n, len};
      H5Pset_chunk(plist.get(), 2, chunk);
      H5Pset_filter(plist.get(), 32000, H5Z_FLAG_OPTIONAL, 0, nullptr);
      joule::data::Hdf5Handle ds(
          H5Dcreate2(f, "input_ids", H5T_STD_I32LE, space.get(), H5P_DEFAULT, plist.get(), H5P_DEFAULT));
      H5Dwrite(ds.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, b.input_ids.data());
    });
  } else if (kind == "empty") {
    joule::data::HostBatch empty;
    empty.resize(0, b.seq_len, b.max_predictions);
    joule::data::write_shard(out, empty);
  } else {
    std::cerr << "make_bad_shard: unknown kind '" << kind << "'\n";
    return 2;
  }
  return 0;
}
