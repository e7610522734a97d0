// A data set's rows read into host batches (no LibTorch): by global sequence id (eval, `joule data inspect`), or a
// rank's runs of rows block by block (the loader's background thread).
#pragma once

#include <cstdint>
#include <deque>
#include <list>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "data/dataset.h"
#include "data/shard.h"
#include "data/shuffle.h"

namespace joule::data {

// Reads the given global sequence ids, in order.
HostBatch read_sequences(const Dataset& dataset, const std::vector<uint64_t>& ids);

// Keeps up to `capacity` shards open, closing the least recently used.
class ShardCache {
 public:
  ShardCache(const Dataset& d, size_t capacity);
  ShardReader& get(size_t shard);
  void clear();

 private:
  const Dataset& dataset_;
  size_t capacity_;
  std::list<size_t> order_;
  std::map<size_t, std::pair<std::unique_ptr<ShardReader>, std::list<size_t>::iterator>> open_;
};

// The blocks a rank reads, each inflated once: a micro-batch's runs of rows are copied out of their blocks, read
// whole the first time a run needs them. A rank walks its part of the stream in order: the block a micro-batch ends in
// is the one the next begins in, and no other block is read twice.
class BlockReader {
 public:
  BlockReader(const Dataset& d, size_t max_open_shards) : dataset_(d), shards_(d, max_open_shards) {}
  HostBatch read(const std::vector<RowRun>& runs);
  // Closes the open shards and forgets the blocks read: the next read opens them again.
  void clear();

 private:
  const HostBatch& block(const BlockLayout::Block& b);

  const Dataset& dataset_;
  ShardCache shards_;
  std::deque<std::pair<BlockLayout::Block, HostBatch>> recent_;
};

}  // namespace joule::data
