// make_bad_shard KIND GOOD_SHARD OUT: a copy of GOOD_SHARD broken in one way, for the bad-input table
// (tests/e2e/bad_inputs.sh). KIND: missing-dataset, wrong-dtype, wrong-shape, ids-beyond-vocab,
// positions-beyond-seq-len, empty.
#include <iostream>
#include <string>

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
    joule::test::write_variant(out, b, "input_ids", [&](hid_t f) { add_dataset(f, "input_ids", H5T_IEEE_F32LE, {n, len}, ids.data(), H5T_NATIVE_FLOAT); });
  } else if (kind == "wrong-shape") {
    joule::test::write_variant(out, b, "input_ids",
                               [&](hid_t f) { add_dataset(f, "input_ids", H5T_STD_I32LE, {n * len}, b.input_ids.data(), H5T_NATIVE_INT32); });
  } else if (kind == "ids-beyond-vocab") {
    b.input_ids[b.input_ids.size() / 2] = 1000000;
    joule::test::write_variant(out, b, "", nullptr);
  } else if (kind == "positions-beyond-seq-len") {
    b.masked_positions[b.masked_positions.size() / 2] = static_cast<int32_t>(len);
    joule::test::write_variant(out, b, "", nullptr);
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
