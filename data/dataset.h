// A pretraining dataset: the list of shards with their sequence counts, validated once and cached
// beside the data (`.joule-index.json`, keyed by each file's size, modification time and a fingerprint of its first
// and last 64 KiB, so a changed file is noticed and validated again).
//
// Its identity: each shard's name (relative to the data set's directory), size, sequence count and checksum
// (FNV-1a-64 of the whole file, computed when the shard is validated and cached with it). A run records it at its
// start and compares it at every resume (trainer/data_record.h); a shard that changes while a run reads it is an
// error at its next open (check_unchanged).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "data/shard.h"
#include "data/shuffle.h"

namespace joule::data {

struct ShardEntry {
  std::string path;
  uint64_t bytes = 0;
  int64_t mtime_ns = 0;
  std::string fingerprint;  // FNV-1a-64 of the first and last 64 KiB: a cached validation must match it too
  std::string checksum;     // FNV-1a-64 of the whole file, computed when the shard is validated
  std::string name;         // the path relative to the data set's directory: what a run records
  ShardStats stats;
};

// What identifies a shard across runs, machines and moves of the whole data set.
struct ShardIdentity {
  std::string name, checksum;
  uint64_t bytes = 0;
  int64_t sequences = 0;
  bool operator==(const ShardIdentity& o) const {
    return name == o.name && checksum == o.checksum && bytes == o.bytes && sequences == o.sequences;
  }
};

// What `joule data create` recorded of a data set it made (OUT/metadata.json), when the shards are its train/ or eval/.
struct CreatedBy {
  std::string metadata_path;
  std::string split;          // "train" or "eval"
  std::string vocab_fnv1a64;  // the vocabulary the shards were made with
  struct Input {
    std::string path;  // as given to `joule data create`
    uint64_t bytes = 0;
    int64_t mtime_ns = 0;
  };
  std::vector<Input> inputs;                  // the text files they were made from
  std::vector<std::string> held_out_fnv1a64;  // the checksums of the eval shards its split held out of them
};

struct DatasetOptions {
  int64_t vocab_size = 0;  // > 0: every id must be below it
  bool use_cache = true;
};

class Dataset {
 public:
  // `spec`: a directory (its *.hdf5 / *.h5 files), a glob pattern, or a text file listing one shard
  // path per line (relative paths are relative to the list file). Throws ShardError naming the shard.
  static Dataset open(const std::string& spec, const DatasetOptions& options = {});
  // The bytes of the shards open() would validate now (not in the index cache with their size and modification
  // time): what a rank waiting for another's open() can expect it to read. 0 where `spec` lists nothing or cannot be
  // read (open() then says why). Stats the shards and reads the cache; opens none.
  static uint64_t bytes_to_validate(const std::string& spec, const DatasetOptions& options = {});

  const std::vector<ShardEntry>& shards() const { return shards_; }
  int64_t size() const { return total_; }  // rows: what the sampler shuffles (each one sequence unless packed)
  int64_t seq_len() const { return seq_len_; }
  int64_t max_predictions() const { return max_predictions_; }
  int64_t pack() const { return pack_; }                   // packed: sequences a row holds at most; else 0
  int64_t sequences() const { return packed_sequences_; }  // the sequences in the rows (size() unless packed)
  int64_t real_tokens() const { return real_tokens_; }     // over every shard
  int64_t masked_predictions() const { return masked_predictions_; }  // over every shard
  // Real tokens over the rows' tokens: the share of the computed positions that are not padding.
  double packing_efficiency() const {
    return total_ > 0 ? static_cast<double>(real_tokens_) / static_cast<double>(total_ * seq_len_) : 0.0;
  }
  int64_t validated_now() const { return validated_now_; }  // shards not taken from the cache
  const std::string& cache_path() const { return cache_path_; }
  const std::string& spec() const { return spec_; }
  // metadata.json's record when `joule data create` made these shards; else nothing.
  const std::optional<CreatedBy>& created_by() const { return created_by_; }

  std::vector<ShardIdentity> identity() const;
  std::string digest() const;  // FNV-1a-64 of identity(): equal digests, equal data sets

  // Throws ShardError when shard `index` is no longer the file that was validated (another size or modification
  // time): called before every open of a shard, so a shard replaced or edited during a run stops it.
  void check_unchanged(size_t index) const;

  // The blocks the global shuffle orders (data/shuffle.h): rows per block = the smallest HDF5 chunk row count of
  // input_ids over the shards, at most kMaxBlockRows. Shards held in one chunk each (small ones) do not count unless
  // all are (then the largest such chunk); 1 when no shard is chunked (any row reads cheaply).
  static constexpr int64_t kMaxBlockRows = 1024;
  int64_t block_rows() const { return block_rows_; }
  BlockLayout block_layout() const;

  // Global sequence id -> (shard index, row in shard).
  std::pair<size_t, int64_t> locate(int64_t id) const;

 private:
  std::vector<ShardEntry> shards_;
  std::vector<int64_t> offsets_;  // prefix sums of sequence counts
  int64_t total_ = 0, seq_len_ = 0, max_predictions_ = 0, pack_ = 0, validated_now_ = 0, block_rows_ = 0;
  int64_t packed_sequences_ = 0, real_tokens_ = 0, masked_predictions_ = 0;
  std::string cache_path_, spec_;
  std::optional<CreatedBy> created_by_;
};

// "" when the two identities are equal; else what differs, naming the shards (the first few of each kind).
std::string describe_changes(const std::vector<ShardIdentity>& recorded, const std::vector<ShardIdentity>& now);

// The vocabulary at `vocab_path` must be the one `joule data create` made the shards with (when it recorded one):
// another vocabulary maps the same ids to other words and trains silently wrong. Throws ShardError naming both.
void check_vocab_file(const Dataset& dataset, const std::string& vocab_path);

// Held-out data must share nothing with training data: no shard with the same content, and no input text file that
// made both (unless they are the train/ and eval/ of one `joule data create`, whose split is by document).
void check_held_out(const Dataset& train, const Dataset& eval);

// `joule data create --out D` writes D/train, D/eval (with --eval-documents) and D/vocab.txt beside D/metadata.json.
// Given such a D, every command means its `split` ("train" or "eval") directory: D/train for train, data inspect and
// bench data, D/eval for eval. Another spec comes back as given; a D without that split is a ShardError naming it.
std::string data_create_split(const std::string& spec, const std::string& split);

// The shard files a spec names (as Dataset::open lists them: a directory's *.hdf5 / *.h5, a glob, a list file, one
// shard), sorted; none opened. ShardError when there are none.
std::vector<std::string> shard_files(const std::string& spec);

// The shards' vocab.txt: in the spec's directory or its parent (as `joule data create` writes OUT/vocab.txt beside
// OUT/train/). Empty when there is none.
std::string find_vocab_beside(const std::string& spec);

}  // namespace joule::data
