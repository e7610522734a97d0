// Pretraining shards in NVIDIA DeepLearningExamples' HDF5 layout:
//   input_ids int32 [N,L], input_mask int8 [N,L], segment_ids int8 [N,L],
//   masked_lm_positions int32 [N,P], masked_lm_ids int32 [N,P], next_sentence_labels int8 [N]
// (older shards: int64 everywhere). Unused masked positions are 0. No LibTorch here.
//
// Packed shards (NVIDIA's MLPerf packed layout, and what `joule data pack` writes) hold up to K sequences a row, one
// after another from position 0: next_sentence_labels is [N,K] (one label a sequence), and two more datasets say where
// the sequences are: packed_input_len int32 [N,K] (each sequence's length; 0 after the row's last sequence) and
// packed_masked_lm_len int32 [N,K] (how many of the row's masked_lm_positions belong to each sequence, in order).
// masked_lm_positions are offsets into the row; input_mask is 1 over the sequences' tokens, 0 after.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "data/hdf5.h"
#include "launch/util/error.h"

namespace joule::data {

// A shard that does not fit the layout; the message names the file, the dataset, expected vs found.
class ShardError : public joule::Error {
 public:
  explicit ShardError(const std::string& message, std::string hint =
                                                      "check the shard with `joule data inspect FILE`, regenerate it "
                                                      "with `joule data create`, or leave it out of data.train")
      : joule::Error(message, std::move(hint)) {}
};

// Rows of a shard in host memory, all widened to int32, row-major.
struct HostBatch {
  int64_t rows = 0, seq_len = 0, max_predictions = 0;
  int64_t pack = 0;  // packed rows: up to `pack` sequences each; 0: one sequence a row (the padded layout)
  std::vector<int32_t> input_ids, input_mask, segment_ids;  // rows * seq_len
  std::vector<int32_t> masked_positions, masked_ids;        // rows * max_predictions
  std::vector<int32_t> next_sentence_labels;                // rows * labels_per_row()
  std::vector<int32_t> sequence_lengths, masked_lengths;    // rows * pack (packed_input_len, packed_masked_lm_len)
  int64_t labels_per_row() const { return pack > 0 ? pack : 1; }
  void resize(int64_t rows, int64_t seq_len, int64_t max_predictions, int64_t pack = 0);  // all zeros
  void resize_for_overwrite(int64_t rows, int64_t seq_len, int64_t max_predictions,
                            int64_t pack = 0);  // contents unspecified
  int64_t sequences_in(int64_t row) const;      // 1 when not packed
};

// Copies row `from_row` of `from` into row `to_row` of `to` (same seq_len, max_predictions and pack).
void copy_row(const HostBatch& from, int64_t from_row, HostBatch& to, int64_t to_row);

// What validating a shard's values found: enough to check it against any vocabulary later.
struct ShardStats {
  int64_t sequences = 0, seq_len = 0, max_predictions = 0;  // sequences: rows (packed: each holding up to `pack`)
  int64_t pack = 0;                                         // packed: sequences a row holds at most; else 0
  int64_t packed_sequences = 0;                             // the sequences in the rows (== sequences when not packed)
  bool int64_layout = false;                                // the older all-int64 variant
  int64_t max_token_id = -1;                                // over input_ids and masked_lm_ids
  int64_t masked_predictions = 0;                           // used prediction slots (before each row's first 0)
  int64_t real_tokens = 0;                                  // sum of input_mask
  int64_t chunk_rows = 0;  // rows per HDF5 chunk of input_ids; 0: not chunked (read when opened, never cached)
};

// Opens and fully validates a shard: every dataset present with an integer type, shapes consistent,
// the same N everywhere, N > 0, positions in [0, L), masks/segments/labels in {0, 1}, ids >= 0.
// `vocab_size` > 0 also checks ids < vocab_size.
ShardStats validate_shard(const std::string& path, int64_t vocab_size = 0);

// Checks cached stats against a vocabulary (the error names the file).
void check_vocab(const std::string& path, const ShardStats& stats, int64_t vocab_size);

class ShardReader {
 public:
  explicit ShardReader(const std::string& path);  // checks the schema (not the values)
  const std::string& path() const { return path_; }
  int64_t sequences() const { return sequences_; }
  int64_t seq_len() const { return seq_len_; }
  int64_t max_predictions() const { return max_predictions_; }
  int64_t pack() const { return pack_; }  // packed: sequences a row holds at most; 0 when not packed
  bool int64_layout() const { return int64_layout_; }
  int64_t chunk_rows() const { return chunk_rows_; }  // rows per HDF5 chunk of input_ids; 0 when not chunked

  // Reads the given rows (any order, repeats allowed) into out[offset ..], in the order given.
  void read_rows(const std::vector<int64_t>& rows, HostBatch& out, int64_t offset = 0);
  // Reads a contiguous range [begin, begin + count) into out (resized): one read per dataset, each chunk inflated once.
  void read_range(int64_t begin, int64_t count, HostBatch& out);

 private:
  // Reads distinct rows in ascending order into out (resized), one hyperslab per run of consecutive rows.
  void read_sorted(const std::vector<int64_t>& sorted, HostBatch& out);

  std::string path_;
  Hdf5Handle file_;
  Hdf5Handle datasets_[8];
  int64_t sequences_ = 0, seq_len_ = 0, max_predictions_ = 0, pack_ = 0, chunk_rows_ = 0;
  bool int64_layout_ = false;
};

// Writes a shard in slices, in the int32/int8 layout, chunked by `chunk_rows` rows (so that random row reads
// decompress little), through HDF5's shuffle and deflate filters (h5py's "gzip"; any HDF5 reader, h5py included,
// reads it). The writer shuffles and compresses whole chunks itself (zlib_compress_runs, data/run_deflate.h), on
// `threads` threads, and hands them to HDF5 as they are. `rows`:
// the shard's row count, or kGrowing for a shard that grows with each append(). The rows go to PATH.tmp, renamed to
// PATH by commit() once written and flushed; a writer destroyed before commit() removes PATH.tmp, so a half-written
// shard never appears under its name.
class ShardWriter {
 public:
  static constexpr int64_t kGrowing = -1;
  // `pack` > 0: a packed shard of up to `pack` sequences a row.
  ShardWriter(std::string path, int64_t rows, int64_t seq_len, int64_t max_predictions, int chunk_rows = 64,
              int threads = 1, int64_t pack = 0);
  ~ShardWriter();
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  void append(const HostBatch& rows);  // after the rows appended so far (same widths)
  void commit();
  int64_t rows_written() const { return appended_; }

 private:
  // Compresses and writes the whole chunks of `rows` rows starting at written_ (with `last`, also the final partial
  // one, padded); returns the rows written.
  int64_t write_chunks(const int32_t* const columns[8], int64_t rows, bool last);
  void write_pending(bool last);
  void add_pending(const HostBatch& rows, int64_t begin, int64_t end);  // rows [begin, end) to wait in pending_
  int64_t pending_rows() const;

  std::string path_, tmp_;
  int64_t rows_, appended_ = 0, written_ = 0;  // rows appended; rows in chunks handed to HDF5
  int64_t chunk_rows_ = 1, widths_[8] = {}, pack_ = 0;
  int columns_ = 6;  // 8 when packed
  int threads_;
  std::vector<int32_t> pending_[8];  // appended rows not yet in a written chunk, row-major per column
  Hdf5Handle file_;
  Hdf5Handle datasets_[8];
  bool committed_ = false;
};

// A whole shard at once through ShardWriter.
void write_shard(const std::string& path, const HostBatch& batch, int chunk_rows = 64);

// In HostBatch order: input_ids, input_mask, ..., next_sentence_labels, then a packed shard's packed_input_len and
// packed_masked_lm_len.
extern const char* const kShardDatasets[8];
int shard_columns(int64_t pack);  // the datasets a shard has: 6, or 8 when packed

}  // namespace joule::data
