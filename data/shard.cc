#include "data/shard.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <numeric>

#include "data/run_deflate.h"
#include "launch/util/file_io.h"
#include "launch/util/parallel.h"

namespace joule::data {

const char* const kShardDatasets[8] = {"input_ids",           "input_mask",          "segment_ids",
                                       "masked_lm_positions", "masked_lm_ids",       "next_sentence_labels",
                                       "packed_input_len",    "packed_masked_lm_len"};

int shard_columns(int64_t pack) { return pack > 0 ? 8 : 6; }

namespace {

enum Column { kInputIds, kInputMask, kSegmentIds, kPositions, kMaskedIds, kNsp, kLengths, kMaskedLengths };
constexpr int64_t kMaxPack = 64;  // sequences a packed row may hold

[[noreturn]] void fail(const std::string& path, const std::string& dataset, const std::string& what) {
  throw ShardError(path + ": dataset '" + dataset + "': " + what);
}

std::vector<int32_t>* column(HostBatch& b, int c) {
  switch (c) {
    case kInputIds:
      return &b.input_ids;
    case kInputMask:
      return &b.input_mask;
    case kSegmentIds:
      return &b.segment_ids;
    case kPositions:
      return &b.masked_positions;
    case kMaskedIds:
      return &b.masked_ids;
    case kNsp:
      return &b.next_sentence_labels;
    case kLengths:
      return &b.sequence_lengths;
    default:
      return &b.masked_lengths;
  }
}

const std::vector<int32_t>* column(const HostBatch& b, int c) { return column(const_cast<HostBatch&>(b), c); }

int64_t width_of(int c, int64_t seq_len, int64_t max_predictions, int64_t pack) {
  if (c >= kNsp) return c == kNsp ? std::max<int64_t>(1, pack) : pack;
  return (c == kPositions || c == kMaskedIds) ? max_predictions : seq_len;
}
int64_t width_of(const HostBatch& b, int c) { return width_of(c, b.seq_len, b.max_predictions, b.pack); }
// The dimensions of a column's dataset: next_sentence_labels is [N] unless packed.
int rank_of(int c, int64_t pack) { return c == kNsp && pack == 0 ? 1 : 2; }

std::string dims_str(const std::vector<hsize_t>& d) {
  std::string s = "[";
  for (size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

}  // namespace

void HostBatch::resize(int64_t r, int64_t l, int64_t p, int64_t k) {
  resize_for_overwrite(r, l, p, k);
  for (int c = 0; c < 8; ++c) std::fill(column(*this, c)->begin(), column(*this, c)->end(), 0);
}

void HostBatch::resize_for_overwrite(int64_t r, int64_t l, int64_t p, int64_t k) {
  rows = r;
  seq_len = l;
  max_predictions = p;
  pack = k;
  for (int c = 0; c < 8; ++c) column(*this, c)->resize(static_cast<size_t>(r * width_of(*this, c)));
}

int64_t HostBatch::sequences_in(int64_t row) const {
  if (pack == 0) return 1;
  int64_t n = 0;
  while (n < pack && sequence_lengths[static_cast<size_t>(row * pack + n)] > 0) ++n;
  return n;
}

void copy_row(const HostBatch& from, int64_t from_row, HostBatch& to, int64_t to_row) {
  for (int c = 0; c < shard_columns(from.pack); ++c) {
    const int64_t w = width_of(from, c);
    std::copy_n(column(from, c)->begin() + from_row * w, w, column(to, c)->begin() + to_row * w);
  }
}

ShardReader::ShardReader(const std::string& path) : path_(path) {
  quiet_hdf5_on_this_thread();  // joule reports HDF5 errors itself
  if (!std::filesystem::exists(path)) throw ShardError(path + ": no such shard file");
  if (H5Fis_hdf5(path.c_str()) <= 0) throw ShardError(path + ": not an HDF5 file (truncated or another format?)");
  file_ = Hdf5Handle(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!file_.valid()) throw ShardError(path + ": cannot open as HDF5 (truncated or corrupt?)");

  std::vector<hsize_t> dims[8];
  const bool packed = H5Lexists(file_.get(), kShardDatasets[kLengths], H5P_DEFAULT) > 0;
  for (int c = 0; c < shard_columns(packed ? 1 : 0); ++c) {
    const char* name = kShardDatasets[c];
    if (H5Lexists(file_.get(), name, H5P_DEFAULT) <= 0)
      fail(path, name,
           std::string("missing (a shard needs input_ids, input_mask, segment_ids, masked_lm_positions, "
                       "masked_lm_ids, next_sentence_labels") +
               (packed ? "; a packed one, with packed_input_len, also packed_masked_lm_len)" : ")"));
    datasets_[c] = Hdf5Handle(H5Dopen2(file_.get(), name, H5P_DEFAULT));
    if (!datasets_[c].valid()) fail(path, name, "cannot be opened as a dataset");
    Hdf5Handle type(H5Dget_type(datasets_[c].get()));
    if (H5Tget_class(type.get()) != H5T_INTEGER) fail(path, name, "expected an integer type, found a non-integer type");
    const size_t bytes = H5Tget_size(type.get());
    if (c == kInputIds && bytes == 8) int64_layout_ = true;
    // A compression filter this HDF5 library lacks (lzf from h5py, blosc, ...) would read as "corrupt" later.
    Hdf5Handle plist(H5Dget_create_plist(datasets_[c].get()));
    for (int f = 0; f < H5Pget_nfilters(plist.get()); ++f) {
      unsigned flags = 0, config = 0;
      size_t nelements = 0;
      char filter_name[128] = {0};
      const H5Z_filter_t id = H5Pget_filter2(plist.get(), static_cast<unsigned>(f), &flags, &nelements, nullptr,
                                             sizeof filter_name, filter_name, &config);
      if (id >= 0 && H5Zfilter_avail(id) <= 0)
        throw ShardError(
            path + ": dataset '" + name + "' is compressed with HDF5 filter " + std::to_string(id) + " (" +
                (filter_name[0] ? filter_name : "unnamed") + "), which this HDF5 library does not have",
            "rewrite the shard without that filter (gzip and shuffle are built in), e.g. h5repack -f NONE IN OUT, or "
            "install the filter plugin and set HDF5_PLUGIN_PATH");
    }
    if (c == kInputIds && H5Pget_layout(plist.get()) == H5D_CHUNKED) {
      hsize_t chunk[2] = {0, 0};
      if (H5Pget_chunk(plist.get(), 2, chunk) >= 1) chunk_rows_ = static_cast<int64_t>(chunk[0]);
    }
    Hdf5Handle space(H5Dget_space(datasets_[c].get()));
    const int rank = H5Sget_simple_extent_ndims(space.get());
    if (rank < 1 || rank > 2)
      fail(path, name, "expected " + std::string(c == kNsp ? "1" : "2") + " dimensions, found " + std::to_string(rank));
    dims[c].resize(static_cast<size_t>(rank));
    H5Sget_simple_extent_dims(space.get(), dims[c].data(), nullptr);
  }
  auto expect_2d = [&](int c) {
    if (dims[c].size() != 2) fail(path, kShardDatasets[c], "expected shape [N, width], found " + dims_str(dims[c]));
  };
  for (int c : {kInputIds, kInputMask, kSegmentIds, kPositions, kMaskedIds}) expect_2d(c);
  sequences_ = static_cast<int64_t>(dims[kInputIds][0]);
  seq_len_ = static_cast<int64_t>(dims[kInputIds][1]);
  max_predictions_ = static_cast<int64_t>(dims[kPositions][1]);
  if (packed) {
    expect_2d(kLengths);
    expect_2d(kMaskedLengths);
    pack_ = static_cast<int64_t>(dims[kLengths][1]);
    if (pack_ < 1 || pack_ > kMaxPack)
      fail(path, kShardDatasets[kLengths],
           "a packed row of " + std::to_string(pack_) + " sequences (joule reads 1 to " + std::to_string(kMaxPack) +
               ")");
    for (int c : {kNsp, kMaskedLengths})
      if (dims[c].size() != 2 || static_cast<int64_t>(dims[c][1]) != pack_)
        fail(path, kShardDatasets[c],
             "expected shape [" + std::to_string(sequences_) + ", " + std::to_string(pack_) +
                 "] like packed_input_len (one value a sequence), found " + dims_str(dims[c]));
  } else if (dims[kNsp].size() != 1) {
    fail(path, kShardDatasets[kNsp],
         "expected shape [N], found " + dims_str(dims[kNsp]) +
             (dims[kNsp].size() == 2 ? " (a packed shard's labels, but packed_input_len is missing)" : ""));
  }
  for (int c = 0; c < shard_columns(pack_); ++c) {
    if (static_cast<int64_t>(dims[c][0]) != sequences_)
      fail(path, kShardDatasets[c],
           "has " + std::to_string(dims[c][0]) + " rows but input_ids has " + std::to_string(sequences_));
  }
  for (int c : {kInputMask, kSegmentIds})
    if (static_cast<int64_t>(dims[c][1]) != seq_len_)
      fail(path, kShardDatasets[c],
           "expected shape [" + std::to_string(sequences_) + ", " + std::to_string(seq_len_) +
               "] like input_ids, found " + dims_str(dims[c]));
  if (static_cast<int64_t>(dims[kMaskedIds][1]) != max_predictions_)
    fail(path, kShardDatasets[kMaskedIds],
         "expected shape [" + std::to_string(sequences_) + ", " + std::to_string(max_predictions_) +
             "] like masked_lm_positions, found " + dims_str(dims[kMaskedIds]));
  if (sequences_ == 0) throw ShardError(path + ": empty shard (0 sequences)");
  if (seq_len_ < 2 || max_predictions_ < 1)
    fail(path, "input_ids",
         "sequence length " + std::to_string(seq_len_) + " or max predictions " + std::to_string(max_predictions_) +
             " too small");
}

void ShardReader::read_sorted(const std::vector<int64_t>& sorted, HostBatch& out) {
  out.resize_for_overwrite(static_cast<int64_t>(sorted.size()), seq_len_, max_predictions_, pack_);
  if (sorted.empty()) return;
  if (sorted.front() < 0 || sorted.back() >= sequences_)
    throw ShardError(path_ + ": row " + std::to_string(sorted.front() < 0 ? sorted.front() : sorted.back()) +
                     " out of range [0, " + std::to_string(sequences_) + ")");
  quiet_hdf5_on_this_thread();  // joule reports HDF5 errors itself
  for (int c = 0; c < shard_columns(pack_); ++c) {
    const hsize_t width = static_cast<hsize_t>(width_of(out, c));
    Hdf5Handle file_space(H5_CHECK(H5Dget_space(datasets_[c].get()), path_));
    H5_CHECK(H5Sselect_none(file_space.get()), path_);
    for (size_t i = 0; i < sorted.size();) {  // one hyperslab per run of consecutive rows
      size_t j = i + 1;
      while (j < sorted.size() && sorted[j] == sorted[j - 1] + 1) ++j;
      hsize_t start[2] = {static_cast<hsize_t>(sorted[i]), 0}, count[2] = {j - i, width};
      H5_CHECK(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_OR, start, nullptr, count, nullptr), path_);
      i = j;
    }
    hsize_t mem_dims[2] = {sorted.size(), width};
    Hdf5Handle mem_space(H5_CHECK(H5Screate_simple(rank_of(c, pack_), mem_dims, nullptr), path_));
    if (H5Dread(datasets_[c].get(), H5T_NATIVE_INT32, mem_space.get(), file_space.get(), H5P_DEFAULT,
                column(out, c)->data()) < 0)
      fail(path_, kShardDatasets[c], "read failed (corrupt or truncated file?)");
  }
}

void ShardReader::read_rows(const std::vector<int64_t>& rows, HostBatch& out, int64_t offset) {
  if (rows.empty()) return;
  // Read each distinct row once, in file order, then place each where it was asked for.
  std::vector<int64_t> sorted(rows);
  std::sort(sorted.begin(), sorted.end());
  sorted.erase(std::unique(sorted.begin(), sorted.end()), sorted.end());
  HostBatch tmp;
  read_sorted(sorted, tmp);
  for (size_t r = 0; r < rows.size(); ++r) {
    const int64_t src = std::lower_bound(sorted.begin(), sorted.end(), rows[r]) - sorted.begin();
    copy_row(tmp, src, out, offset + static_cast<int64_t>(r));
  }
}

void ShardReader::read_range(int64_t begin, int64_t count, HostBatch& out) {
  if (begin < 0 || count < 0 || begin + count > sequences_)
    throw ShardError(path_ + ": rows [" + std::to_string(begin) + ", " + std::to_string(begin + count) +
                     ") out of range [0, " + std::to_string(sequences_) + ")");
  std::vector<int64_t> rows(static_cast<size_t>(count));
  std::iota(rows.begin(), rows.end(), begin);
  read_sorted(rows, out);  // one hyperslab: each chunk inflated once, straight into `out`
}

namespace {

// A packed row's layout: its sequences fill it from position 0 (lengths > 0, then only 0s), input_mask is 1 over them
// and 0 after, each sequence's masked positions (packed_masked_lm_len of them, in the row's order) lie inside it after
// its [CLS], and the prediction slots the lengths count are exactly those used. Returns the row's sequences.
int64_t check_packed_row(const std::string& path, const HostBatch& b, int64_t r, const std::string& where) {
  const int64_t k_max = b.pack, len = b.seq_len, p_max = b.max_predictions;
  const int32_t* lengths = b.sequence_lengths.data() + r * k_max;
  const int32_t* masked = b.masked_lengths.data() + r * k_max;
  const int32_t* positions = b.masked_positions.data() + r * p_max;
  int64_t sequences = 0, start = 0, slot = 0;
  for (int64_t k = 0; k < k_max; ++k) {
    const std::string which = "sequence " + std::to_string(k);
    if (lengths[k] < 0 || masked[k] < 0)
      fail(path, lengths[k] < 0 ? "packed_input_len" : "packed_masked_lm_len",
           "negative value " + std::to_string(std::min(lengths[k], masked[k])) + " for " + which + where);
    if (lengths[k] == 0) {
      if (masked[k] != 0)
        fail(path, "packed_masked_lm_len", std::to_string(masked[k]) + " predictions for the empty " + which + where);
      continue;
    }
    if (sequences != k)
      fail(path, "packed_input_len",
           "length " + std::to_string(lengths[k]) + " for " + which +
               " after an empty slot (a row's sequences come first, then zeros)" + where);
    if (lengths[k] < 2)
      fail(path, "packed_input_len",
           "length " + std::to_string(lengths[k]) + " for " + which + " (at least [CLS] and [SEP])" + where);
    if (start + lengths[k] > len)
      fail(path, "packed_input_len",
           "length " + std::to_string(lengths[k]) + " for " + which + " runs past the row's " + std::to_string(len) +
               " tokens (it starts at " + std::to_string(start) + ")" + where);
    if (slot + masked[k] > p_max)
      fail(path, "packed_masked_lm_len",
           "the row's predictions add up past its " + std::to_string(p_max) + " slots at " + which + where);
    for (int64_t i = slot; i < slot + masked[k]; ++i)
      if (positions[i] <= start || positions[i] >= start + lengths[k])
        fail(path, "masked_lm_positions",
             "position " + std::to_string(positions[i]) + " (slot " + std::to_string(i) + ") is outside " + which +
                 " [" + std::to_string(start + 1) + ", " + std::to_string(start + lengths[k]) + ")" + where);
    slot += masked[k];
    start += lengths[k];
    ++sequences;
  }
  const int32_t* mask = b.input_mask.data() + r * len;
  const int64_t real = std::count(mask, mask + len, 1);
  if (real != start || (start < len && mask[start] != 0) || (start > 0 && mask[start - 1] != 1))
    fail(path, "packed_input_len",
         "the sequences' lengths add up to " + std::to_string(start) + " tokens but input_mask marks " +
             std::to_string(real) + (real == start ? " (not the first ones)" : "") + where);
  if (slot < p_max && positions[slot] != 0)
    fail(path, "packed_masked_lm_len",
         "the lengths count " + std::to_string(slot) + " predictions but slot " + std::to_string(slot) +
             " holds position " + std::to_string(positions[slot]) + where);
  return sequences;
}

}  // namespace

ShardStats validate_shard(const std::string& path, int64_t vocab_size) {
  ShardReader reader(path);
  ShardStats s;
  s.sequences = reader.sequences();
  s.seq_len = reader.seq_len();
  s.max_predictions = reader.max_predictions();
  s.pack = reader.pack();
  s.int64_layout = reader.int64_layout();
  s.chunk_rows = reader.chunk_rows();
  HostBatch b;
  const int64_t block = 4096;
  // Rows that cannot train: no real token (a pre-allocated, never-filled row) or no masked prediction (the masked-LM
  // loss of a batch of only such rows is 0/0 = NaN).
  int64_t empty_rows = 0, unmasked_rows = 0, first_empty = -1, first_unmasked = -1;
  for (int64_t begin = 0; begin < s.sequences; begin += block) {
    const int64_t n = std::min(block, s.sequences - begin);
    reader.read_range(begin, n, b);
    auto where = [&](int64_t row) { return " (row " + std::to_string(begin + row) + ")"; };
    for (int64_t i = 0; i < n * s.seq_len; ++i) {
      const int32_t id = b.input_ids[i], m = b.input_mask[i], seg = b.segment_ids[i];
      if (id < 0) fail(path, "input_ids", "negative token id " + std::to_string(id) + where(i / s.seq_len));
      if (m != 0 && m != 1)
        fail(path, "input_mask", "values must be 0 or 1, found " + std::to_string(m) + where(i / s.seq_len));
      if (seg != 0 && seg != 1)
        fail(path, "segment_ids", "values must be 0 or 1, found " + std::to_string(seg) + where(i / s.seq_len));
      s.max_token_id = std::max<int64_t>(s.max_token_id, id);
      s.real_tokens += m;
    }
    for (int64_t r = 0; r < n; ++r) {
      int64_t tokens = 0;
      for (int64_t t = 0; t < s.seq_len; ++t) tokens += b.input_mask[r * s.seq_len + t];
      if (tokens == 0 && empty_rows++ == 0) first_empty = begin + r;
      if (b.masked_positions[r * s.max_predictions] == 0 && unmasked_rows++ == 0) first_unmasked = begin + r;
      bool ended = false;
      for (int64_t k = 0; k < s.max_predictions; ++k) {
        const int32_t pos = b.masked_positions[r * s.max_predictions + k], id = b.masked_ids[r * s.max_predictions + k];
        if (pos < 0 || pos >= s.seq_len)
          fail(path, "masked_lm_positions",
               "position " + std::to_string(pos) + " is outside the sequence length " + std::to_string(s.seq_len) +
                   where(r));
        if (id < 0) fail(path, "masked_lm_ids", "negative token id " + std::to_string(id) + where(r));
        ended |= pos == 0;
        if (!ended) {
          ++s.masked_predictions;
          s.max_token_id = std::max<int64_t>(s.max_token_id, id);
        }
      }
      for (int64_t k = 0; k < b.labels_per_row(); ++k) {
        const int32_t label = b.next_sentence_labels[r * b.labels_per_row() + k];
        if (label != 0 && label != 1)
          fail(path, "next_sentence_labels", "values must be 0 or 1, found " + std::to_string(label) + where(r));
      }
      s.packed_sequences += s.pack > 0 && tokens > 0 ? check_packed_row(path, b, r, where(r)) : 1;
    }
  }
  if (empty_rows > 0)
    fail(path, "input_mask",
         std::to_string(empty_rows) + " of " + std::to_string(s.sequences) +
             " rows have no real token (all-zero rows, first row " + std::to_string(first_empty) +
             "): a pre-allocated shard that was never filled?");
  if (unmasked_rows > 0)
    fail(path, "masked_lm_positions",
         std::to_string(unmasked_rows) + " of " + std::to_string(s.sequences) +
             " rows have no masked prediction (first row " + std::to_string(first_unmasked) +
             "): the masked-LM loss of such rows is undefined");
  if (vocab_size > 0) check_vocab(path, s, vocab_size);
  return s;
}

void check_vocab(const std::string& path, const ShardStats& s, int64_t vocab_size) {
  if (s.max_token_id >= vocab_size)
    throw ShardError(path + ": dataset 'input_ids'/'masked_lm_ids': token id " + std::to_string(s.max_token_id) +
                     " is not below the vocabulary size " + std::to_string(vocab_size) +
                     " (shards made with another vocab.txt?)");
}

namespace {
constexpr int kDeflateLevel = 4;  // the filter's parameter: h5py's compression="gzip" default, as NVIDIA's shards
bool one_byte_column(int c) { return c == kInputMask || c == kSegmentIds || c == kNsp; }
// Each dataset's type in the file: NVIDIA's (int32 ids and positions, int8 flags; the packed lengths int32).
hid_t file_type(int c) { return one_byte_column(c) ? H5T_STD_I8LE : H5T_STD_I32LE; }
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the shard writer stores int32 values as their bytes in memory");
}  // namespace

ShardWriter::ShardWriter(std::string path, int64_t rows, int64_t seq_len, int64_t max_predictions, int chunk_rows,
                         int threads, int64_t pack)
    : path_(std::move(path)),
      tmp_(path_ + ".tmp"),
      rows_(rows),
      pack_(pack),
      columns_(shard_columns(pack)),
      threads_(std::max(1, threads)) {
  file_ = Hdf5Handle(H5_CHECK(H5Fcreate(tmp_.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), tmp_));
  const bool growing = rows == kGrowing;
  chunk_rows_ = growing ? chunk_rows : std::max<int64_t>(1, std::min<int64_t>(chunk_rows, rows));
  for (int c = 0; c < columns_; ++c) {
    widths_[c] = width_of(c, seq_len, max_predictions, pack);
    const hsize_t width = static_cast<hsize_t>(widths_[c]);
    const int rank = rank_of(c, pack);
    hsize_t dims[2] = {static_cast<hsize_t>(growing ? 0 : rows), width},
            max_dims[2] = {growing ? H5S_UNLIMITED : dims[0], width};
    hsize_t chunk[2] = {static_cast<hsize_t>(chunk_rows_), width};
    Hdf5Handle space(H5_CHECK(H5Screate_simple(rank, dims, max_dims), tmp_));
    Hdf5Handle props(H5_CHECK(H5Pcreate(H5P_DATASET_CREATE), tmp_));
    H5_CHECK(H5Pset_obj_track_times(props.get(), false), tmp_);  // no timestamps: same input, same bytes
    if (rows != 0) {
      H5_CHECK(H5Pset_chunk(props.get(), rank, chunk), tmp_);
      H5_CHECK(H5Pset_shuffle(props.get()), tmp_);  // int32 ids below 2^16: two bytes of four are zeros, in runs
      H5_CHECK(H5Pset_deflate(props.get(), kDeflateLevel), tmp_);
    }
    datasets_[c] = Hdf5Handle(H5_CHECK(
        H5Dcreate2(file_.get(), kShardDatasets[c], file_type(c), space.get(), H5P_DEFAULT, props.get(), H5P_DEFAULT),
        tmp_));
  }
}

ShardWriter::~ShardWriter() {
  if (committed_) return;
  // An error is unwinding (a full disk, most often) and the temporary is to go. Its blocks are freed first, so that
  // the close (which flushes HDF5's metadata) has room to complete.
  if (::truncate(tmp_.c_str(), 0) != 0) {
  }
  for (auto& d : datasets_) d.reset();
  file_.reset();
  std::error_code ec;
  std::filesystem::remove(tmp_, ec);
}

void ShardWriter::append(const HostBatch& b) {
  if (b.rows == 0) return;
  if (rows_ != kGrowing && appended_ + b.rows > rows_)
    throw joule::InternalError(tmp_ + ": rows written past the shard's end");
  if (b.pack != pack_) throw joule::InternalError(tmp_ + ": rows of another packing appended");
  for (int c = 0; c < columns_; ++c)
    if (width_of(b, c) != widths_[c]) throw joule::InternalError(tmp_ + ": rows of another width appended");
  appended_ += b.rows;
  // Rows pending from an earlier append are topped up to a whole chunk and written first; then the whole chunks go
  // straight from `b`, and only the rest is copied to wait for the next append.
  int64_t from_row = 0;
  if (pending_rows() > 0) {
    from_row = std::min(b.rows, chunk_rows_ - pending_rows());
    add_pending(b, 0, from_row);
    if (pending_rows() == chunk_rows_) write_pending(false);
  }
  if (pending_rows() == 0) {
    const int32_t* columns[8] = {};
    for (int c = 0; c < columns_; ++c) columns[c] = column(b, c)->data() + from_row * widths_[c];
    from_row += write_chunks(columns, b.rows - from_row, false);
  }
  add_pending(b, from_row, b.rows);
}

void ShardWriter::add_pending(const HostBatch& b, int64_t begin, int64_t end) {
  for (int c = 0; c < columns_; ++c) {
    const std::vector<int32_t>& from = *column(b, c);
    pending_[c].insert(pending_[c].end(), from.begin() + begin * widths_[c], from.begin() + end * widths_[c]);
  }
}

int64_t ShardWriter::pending_rows() const {
  return static_cast<int64_t>(pending_[kInputIds].size()) / widths_[kInputIds];
}

void ShardWriter::write_pending(bool last) {
  const int32_t* columns[8] = {};
  for (int c = 0; c < columns_; ++c) columns[c] = pending_[c].data();
  const int64_t done = write_chunks(columns, pending_rows(), last);
  for (int c = 0; c < columns_; ++c) pending_[c].erase(pending_[c].begin(), pending_[c].begin() + done * widths_[c]);
}

int64_t ShardWriter::write_chunks(const int32_t* const columns[8], int64_t rows, bool last) {
  const int64_t chunks = rows / chunk_rows_ + (last && rows % chunk_rows_ ? 1 : 0);
  if (chunks == 0) return 0;
  if (rows_ == kGrowing) {
    for (int c = 0; c < columns_; ++c) {
      const hsize_t extent[2] = {static_cast<hsize_t>(appended_), static_cast<hsize_t>(widths_[c])};
      H5_CHECK(H5Dset_extent(datasets_[c].get(), extent), tmp_);
    }
  }
  // Compress every (chunk, column) on the worker threads: the bytes in the file's type, the last chunk padded with
  // zeros to its full size (HDF5 stores edge chunks whole), shuffled and deflated as HDF5's filters do.
  std::vector<std::string> compressed(static_cast<size_t>(chunks) * static_cast<size_t>(columns_));
  // Column-major (k = column * chunks + chunk): parallel_for deals tasks out in turn, so every worker gets its share
  // of input_ids, the column that costs the most.
  joule::parallel_for(compressed.size(), threads_, [&](size_t k, int) {
    const int c = static_cast<int>(k / static_cast<size_t>(chunks));
    const int64_t chunk = static_cast<int64_t>(k % static_cast<size_t>(chunks)), width = widths_[c];
    const size_t count = static_cast<size_t>(std::min(chunk_rows_, rows - chunk * chunk_rows_) * width);
    const size_t elements = static_cast<size_t>(chunk_rows_ * width);
    const int32_t* from = columns[c] + chunk * chunk_rows_ * width;
    const size_t element = one_byte_column(c) ? 1 : 4;
    thread_local std::string raw;
    raw.assign(elements * element, '\0');
    // One byte: the value. Four: HDF5's shuffle, byte j of element i at j * elements + i (little-endian values).
    for (size_t j = 0; j < element; ++j) {
      char* to = raw.data() + j * elements;
      for (size_t i = 0; i < count; ++i) to[i] = static_cast<char>(static_cast<uint32_t>(from[i]) >> (8 * j));
    }
    zlib_compress_runs(reinterpret_cast<const uint8_t*>(raw.data()), raw.size(), compressed[k]);
  });
  for (size_t k = 0; k < compressed.size(); ++k) {
    const int c = static_cast<int>(k / static_cast<size_t>(chunks));
    const hsize_t offset[2] = {
        static_cast<hsize_t>(written_ + static_cast<int64_t>(k % static_cast<size_t>(chunks)) * chunk_rows_), 0};
    H5_CHECK(H5Dwrite_chunk(datasets_[c].get(), H5P_DEFAULT, 0, offset, compressed[k].size(), compressed[k].data()),
             tmp_);
  }
  const int64_t done = std::min(rows, chunks * chunk_rows_);
  written_ += done;
  return done;
}

void ShardWriter::commit() {
  if (rows_ != kGrowing && appended_ != rows_)
    throw joule::InternalError(tmp_ + ": " + std::to_string(appended_) + " of " + std::to_string(rows_) +
                               " rows written at commit");
  write_pending(true);
  H5_CHECK(H5Fflush(file_.get(), H5F_SCOPE_GLOBAL), tmp_);
  for (auto& d : datasets_) d.reset();
  file_.reset();
  rename_durably(tmp_, path_);
  committed_ = true;
}

void write_shard(const std::string& path, const HostBatch& b, int chunk_rows) {
  ShardWriter writer(path, b.rows, b.seq_len, b.max_predictions, chunk_rows, 1, b.pack);
  writer.append(b);
  writer.commit();
}

}  // namespace joule::data
