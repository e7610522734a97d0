// A pretraining dataset: the list of shards with their sequence counts, validated once and cached
// beside the data (`.joule-index.json`, keyed by each file's size and modification time, so a changed
// file is noticed and validated again).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/shard.h"

namespace joule::data {

struct ShardEntry {
  std::string path;
  uint64_t bytes = 0;
  int64_t mtime_ns = 0;
  std::string fingerprint;  // FNV-1a-64 of the first and last 64 KiB: a cached validation must match it too
  ShardStats stats;
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

  const std::vector<ShardEntry>& shards() const { return shards_; }
  int64_t size() const { return total_; }
  int64_t seq_len() const { return seq_len_; }
  int64_t max_predictions() const { return max_predictions_; }
  int64_t validated_now() const { return validated_now_; }  // shards not taken from the cache
  const std::string& cache_path() const { return cache_path_; }

  // Global sequence id -> (shard index, row in shard).
  std::pair<size_t, int64_t> locate(int64_t id) const;

 private:
  std::vector<ShardEntry> shards_;
  std::vector<int64_t> offsets_;  // prefix sums of sequence counts
  int64_t total_ = 0, seq_len_ = 0, max_predictions_ = 0, validated_now_ = 0;
  std::string cache_path_;
};

// The directory holding the shards' vocab.txt: the spec's directory or its parent (as `joule data
// create` writes OUT/vocab.txt beside OUT/train/). Empty when there is none.
std::string find_vocab_beside(const std::string& spec);

}  // namespace joule::data
