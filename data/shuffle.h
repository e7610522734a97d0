// The global shuffle: a keyed permutation of the data set's blocks per epoch, and the distributed sampler built on it.
//
// What is random and what is not (docs/data.md, "The global shuffle"):
// - A block is `block_rows` consecutive rows of one shard (the shard's last block may be shorter). The data set chooses
//   block_rows from the shards' HDF5 chunking (data/dataset.h), so that reading a block inflates its chunks once:
//   reading single rows of gzip-compressed shards inflates a whole chunk per row and cannot keep up with a step.
// - Every epoch, all blocks of all shards are put in a new order by a keyed Feistel permutation (any block can follow
//   any other, whatever the file split), computed on demand: O(shards) memory for any N, e.g. 450,000,000.
// - The epoch's sequence stream is those blocks' rows, block after block; a global step takes the next
//   `global_batch` rows of the stream. Which sequences a step trains on therefore depends on the seed, the epoch and
//   the blocks, never on the world size, so a run can resume on another world size. Rows of one block keep their
//   file order and train in the same or adjacent steps, every epoch (`joule data create` and NVIDIA's
//   create_pretraining_data.py both shuffle the sequences inside each shard, so a block is a random sample of its
//   shard).
// - Within a step, rank r takes the r-th of `world_size` equal contiguous parts of the step's rows, micro-batch after
//   micro-batch: a rank reads whole blocks, not a row of every block. The step's summed gradient does not depend on
//   which rank holds which rows.
// block_rows 1 is an exact permutation of all N sequences.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace joule::data {

// A keyed bijection on [0, n): a Feistel network on the smallest even-width power of two >= n, with cycle-walking.
class Permutation {
 public:
  static constexpr int kRounds = 6;
  Permutation(uint64_t n, uint64_t seed, uint64_t epoch);
  uint64_t operator()(uint64_t index) const;  // index < size()
  uint64_t inverse(uint64_t value) const;     // value < size(): the index that maps to it
  uint64_t size() const { return n_; }

 private:
  uint64_t feistel(uint64_t x) const;  // a bijection on [0, 2^(2*half_bits_))
  uint64_t feistel_inverse(uint64_t x) const;
  uint64_t n_;
  int half_bits_;
  uint64_t half_mask_;
  uint64_t keys_[kRounds];
};

// The data set as blocks: each shard's rows cut into runs of block_rows, the last one of a shard possibly shorter.
// O(shards) memory, shared by its copies (it never changes).
class BlockLayout {
 public:
  // shard_rows: each shard's sequence count (> 0); block_rows > 0. Throws InternalError otherwise.
  BlockLayout(std::vector<int64_t> shard_rows, int64_t block_rows);

  struct Block {
    size_t shard = 0;
    int64_t row = 0;   // its first row in the shard
    int64_t rows = 0;  // block_rows, or fewer for a shard's last block
    bool operator==(const Block& o) const { return shard == o.shard && row == o.row && rows == o.rows; }
  };
  Block block(uint64_t index) const;  // index < blocks()
  uint64_t blocks() const { return t_->first_block.back(); }
  uint64_t sequences() const { return t_->first_sequence.back(); }
  int64_t block_rows() const { return t_->block_rows; }
  size_t shards() const { return t_->shard_rows.size(); }
  // The data set's sequence id of a shard's row (shards in order, rows in order).
  uint64_t sequence_id(size_t shard, int64_t row) const {
    return t_->first_sequence[shard] + static_cast<uint64_t>(row);
  }
  // The blocks shorter than block_rows: (block index, rows missing), ascending.
  std::vector<std::pair<uint64_t, int64_t>> short_blocks() const;
  // How the order is named in a run's record: another name, another order for the same position.
  std::string order_name() const;

 private:
  struct Tables {
    std::vector<int64_t> shard_rows;
    std::vector<uint64_t> first_block, first_sequence;  // prefix sums, one entry more than shards
    int64_t block_rows = 0;
  };
  std::shared_ptr<const Tables> t_;
};

// One epoch's order of the blocks, and where each starts in the epoch's sequence stream. Finding the block at a
// stream position takes O(log blocks * log shards); memory O(shards) (one entry per short block).
class BlockOrder {
 public:
  BlockOrder(const BlockLayout& layout, uint64_t seed, uint64_t epoch);

  struct Placed {
    uint64_t index = 0;  // its place in the epoch's order
    uint64_t start = 0;  // the stream position of its first row
    BlockLayout::Block block;
  };
  Placed at(uint64_t position) const;        // the block holding stream position `position` (< sequences)
  Placed after(const Placed& placed) const;  // the next block in the order (not past the last)
  const BlockLayout& layout() const { return layout_; }

 private:
  uint64_t start_of(uint64_t index) const;  // the stream position where the block at `index` starts
  Placed placed(uint64_t index, uint64_t start) const;

  BlockLayout layout_;
  Permutation permutation_;
  std::vector<uint64_t> short_index_;     // the places of the short blocks in this epoch's order, ascending
  std::vector<uint64_t> missing_before_;  // rows missing in the short blocks before each of those (one entry more)
};

// Which sequences each rank reads. A global step consumes `global_batch` consecutive positions of the epoch's
// stream; rank r's micro-step m reads positions step_start + r*global_batch/W + m*b + [0, b). Every rank gets the same
// number of micro-batches (N mod global_batch sequences are dropped each epoch), and the set of sequences a global
// step trains on does not depend on the world size.
struct SamplerConfig {
  BlockLayout layout;
  uint64_t global_batch = 0;  // sequences per optimizer step, all ranks and micro-batches together
  uint64_t micro_batch = 0;   // sequences per rank per forward/backward
  int world_size = 1;
  int rank = 0;
  uint64_t seed = 0;
};

// Where the run is in the data: enough to resume exactly, also on another world size when
// `position` sits on a global-step boundary (as checkpoints do).
struct SamplerState {
  uint64_t epoch = 0;
  uint64_t position = 0;  // sequences consumed in this epoch by all ranks together
  bool operator==(const SamplerState& o) const { return epoch == o.epoch && position == o.position; }
};

// Rows [row, row + count) of `block`'s shard, all inside `block`.
struct RowRun {
  BlockLayout::Block block;
  int64_t row = 0;
  int64_t count = 0;
};

// A micro-batch's rows: `runs` in stream order, which are positions [first, first + micro_batch) of `epoch`'s stream.
struct MicroBatchRows {
  uint64_t epoch = 0;
  uint64_t first = 0;
  std::vector<RowRun> runs;
  // The stream index of its row 0 over the whole run, the same whatever the world size: epoch * 2^40 + first.
  uint64_t first_row_index() const { return (epoch << 40) + first; }
};

class DistributedSampler {
 public:
  explicit DistributedSampler(const SamplerConfig& config);  // throws SamplerError

  uint64_t steps_per_epoch() const { return steps_per_epoch_; }
  uint64_t accumulation() const { return accumulation_; }  // micro-batches per rank per step
  const SamplerConfig& config() const { return config_; }

  // Where a loader starts: a position that is not a multiple of global_batch (a resume with another global batch)
  // begins its steps there, up to the end of that epoch. Without it, steps begin at multiples of global_batch.
  void begin_at(const SamplerState& start);
  // This rank's next micro-batch as runs of rows, in stream order; advances `state` by one micro-step. A step that
  // would not fit in the epoch's stream begins the next epoch.
  MicroBatchRows next(SamplerState& state) const;
  // The same as the data set's sequence ids.
  std::vector<uint64_t> next_ids(SamplerState& state) const;

 private:
  SamplerConfig config_;
  uint64_t steps_per_epoch_ = 0, accumulation_ = 0;
  uint64_t origin_epoch_ = 0, origin_ = 0;  // steps of epoch origin_epoch_ begin at origin_ + k * global_batch
  mutable uint64_t cached_epoch_ = ~0ull;
  mutable std::optional<BlockOrder> order_;  // the order of epoch cached_epoch_
};

}  // namespace joule::data
