#include "data/shuffle.h"

#include <algorithm>
#include <string>

#include "data/data_error.h"
#include "launch/util/error.h"
#include "launch/util/hash.h"

namespace joule::data {

Permutation::Permutation(uint64_t n, uint64_t seed, uint64_t epoch) : n_(n) {
  if (n == 0) throw joule::InternalError("Permutation: empty domain");
  int bits = 2;
  while (bits < 64 && (1ull << bits) < n) ++bits;
  if (bits % 2) ++bits;  // the smallest even-width power of two >= n: at most 4n, so walks are short
  half_bits_ = bits / 2;
  half_mask_ = (1ull << half_bits_) - 1;
  uint64_t k = mix64(seed ^ 0x6a6f756c65ull) ^ mix64(epoch + kGoldenGamma);
  for (uint64_t& key : keys_) key = k = mix64(k + kGoldenGamma);
}

uint64_t Permutation::feistel(uint64_t x) const {
  uint64_t left = x >> half_bits_, right = x & half_mask_;
  for (uint64_t key : keys_) {
    const uint64_t next = left ^ (mix64(right ^ key) & half_mask_);
    left = right;
    right = next;
  }
  return (left << half_bits_) | right;
}

uint64_t Permutation::feistel_inverse(uint64_t x) const {
  uint64_t left = x >> half_bits_, right = x & half_mask_;
  for (int r = kRounds - 1; r >= 0; --r) {
    const uint64_t previous = right ^ (mix64(left ^ keys_[r]) & half_mask_);
    right = left;
    left = previous;
  }
  return (left << half_bits_) | right;
}

uint64_t Permutation::operator()(uint64_t index) const {
  if (index >= n_)
    throw joule::InternalError("Permutation: index " + std::to_string(index) + " >= size " + std::to_string(n_));
  uint64_t x = feistel(index);
  while (x >= n_) x = feistel(x);  // cycle-walking: stays a bijection on [0, n)
  return x;
}

uint64_t Permutation::inverse(uint64_t value) const {
  if (value >= n_)
    throw joule::InternalError("Permutation: value " + std::to_string(value) + " >= size " + std::to_string(n_));
  uint64_t x = feistel_inverse(value);
  while (x >= n_) x = feistel_inverse(x);  // the walk back along the same cycle
  return x;
}

BlockLayout::BlockLayout(std::vector<int64_t> shard_rows, int64_t block_rows) {
  auto t = std::make_shared<Tables>();
  t->shard_rows = std::move(shard_rows);
  t->block_rows = block_rows;
  if (t->shard_rows.empty() || block_rows <= 0)
    throw joule::InternalError("BlockLayout: " + std::to_string(t->shard_rows.size()) + " shards, block rows " +
                               std::to_string(block_rows));
  t->first_block.push_back(0);
  t->first_sequence.push_back(0);
  for (int64_t rows : t->shard_rows) {
    if (rows <= 0) throw joule::InternalError("BlockLayout: a shard of " + std::to_string(rows) + " rows");
    t->first_block.push_back(t->first_block.back() + static_cast<uint64_t>((rows + block_rows - 1) / block_rows));
    t->first_sequence.push_back(t->first_sequence.back() + static_cast<uint64_t>(rows));
  }
  t_ = std::move(t);
}

BlockLayout::Block BlockLayout::block(uint64_t index) const {
  if (index >= blocks())
    throw joule::InternalError("BlockLayout: block " + std::to_string(index) + " of " + std::to_string(blocks()));
  const std::vector<uint64_t>& first = t_->first_block;
  const size_t shard = static_cast<size_t>(std::upper_bound(first.begin(), first.end(), index) - first.begin()) - 1;
  const int64_t row = static_cast<int64_t>(index - first[shard]) * t_->block_rows;
  return {shard, row, std::min(t_->block_rows, t_->shard_rows[shard] - row)};
}

std::vector<std::pair<uint64_t, int64_t>> BlockLayout::short_blocks() const {
  std::vector<std::pair<uint64_t, int64_t>> out;
  for (size_t s = 0; s < t_->shard_rows.size(); ++s)
    if (const int64_t tail = t_->shard_rows[s] % t_->block_rows; tail != 0)
      out.emplace_back(t_->first_block[s + 1] - 1, t_->block_rows - tail);
  return out;
}

std::string BlockLayout::order_name() const {
  return "blocks of " + std::to_string(block_rows()) + (block_rows() == 1 ? " row" : " rows");
}

BlockOrder::BlockOrder(const BlockLayout& layout, uint64_t seed, uint64_t epoch)
    : layout_(layout), permutation_(layout.blocks(), seed, epoch) {
  std::vector<std::pair<uint64_t, int64_t>> shorts = layout_.short_blocks();
  for (auto& [block, missing] : shorts) block = permutation_.inverse(block);  // where it lands this epoch
  std::sort(shorts.begin(), shorts.end());
  missing_before_.push_back(0);
  for (const auto& [place, missing] : shorts) {
    short_index_.push_back(place);
    missing_before_.push_back(missing_before_.back() + static_cast<uint64_t>(missing));
  }
}

uint64_t BlockOrder::start_of(uint64_t index) const {
  const size_t shorter =
      static_cast<size_t>(std::lower_bound(short_index_.begin(), short_index_.end(), index) - short_index_.begin());
  return index * static_cast<uint64_t>(layout_.block_rows()) - missing_before_[shorter];
}

BlockOrder::Placed BlockOrder::placed(uint64_t index, uint64_t start) const {
  return {index, start, layout_.block(permutation_(index))};
}

BlockOrder::Placed BlockOrder::at(uint64_t position) const {
  if (position >= layout_.sequences())
    throw joule::InternalError("BlockOrder: position " + std::to_string(position) + " of " +
                               std::to_string(layout_.sequences()));
  uint64_t low = 0, high = layout_.blocks() - 1;  // the last index whose block starts at or before `position`
  while (low < high) {
    const uint64_t middle = low + (high - low + 1) / 2;
    if (start_of(middle) <= position)
      low = middle;
    else
      high = middle - 1;
  }
  return placed(low, start_of(low));
}

BlockOrder::Placed BlockOrder::after(const Placed& p) const {
  if (p.index + 1 >= layout_.blocks()) throw joule::InternalError("BlockOrder: no block after the epoch's last");
  return placed(p.index + 1, p.start + static_cast<uint64_t>(p.block.rows));
}

DistributedSampler::DistributedSampler(const SamplerConfig& c) : config_(c) {
  auto bad = [](const std::string& m) { throw SamplerError("sampler: " + m); };
  if (c.world_size < 1 || c.rank < 0 || c.rank >= c.world_size)
    bad("rank " + std::to_string(c.rank) + " is outside world size " + std::to_string(c.world_size));
  if (c.micro_batch == 0 || c.global_batch == 0) bad("micro batch and global batch must be positive");
  const uint64_t per_micro_step = c.micro_batch * static_cast<uint64_t>(c.world_size);
  if (c.global_batch % per_micro_step != 0)
    bad("global batch " + std::to_string(c.global_batch) + " is not divisible by micro batch " +
        std::to_string(c.micro_batch) + " x world size " + std::to_string(c.world_size));
  accumulation_ = c.global_batch / per_micro_step;
  if (c.layout.sequences() >= (uint64_t{1} << 40))  // MicroBatchRows::first_row_index keeps 40 bits for a position
    bad("the dataset's " + std::to_string(c.layout.sequences()) + " sequences are more than 2^40");
  steps_per_epoch_ = c.layout.sequences() / c.global_batch;
  if (steps_per_epoch_ == 0)
    bad("the dataset's " + std::to_string(c.layout.sequences()) + " sequences do not fill one global batch of " +
        std::to_string(c.global_batch));
}

void DistributedSampler::begin_at(const SamplerState& start) {
  origin_epoch_ = start.epoch;
  origin_ = start.position % config_.global_batch;
}

MicroBatchRows DistributedSampler::next(SamplerState& state) const {
  const SamplerConfig& c = config_;
  uint64_t origin = state.epoch == origin_epoch_ && state.position >= origin_ ? origin_ : 0;
  if ((state.position - origin) % c.global_batch == 0 && state.position + c.global_batch > c.layout.sequences()) {
    ++state.epoch;  // the remainder that does not fill a step is dropped
    state.position = origin = 0;
  }
  if (!order_ || cached_epoch_ != state.epoch) {
    order_.emplace(c.layout, c.seed, state.epoch);
    cached_epoch_ = state.epoch;
  }
  const uint64_t world = static_cast<uint64_t>(c.world_size), per_micro_step = c.micro_batch * world;
  const uint64_t into = state.position - origin;
  const uint64_t step_start = origin + into / c.global_batch * c.global_batch;
  const uint64_t first = step_start + static_cast<uint64_t>(c.rank) * (c.global_batch / world) +
                         into % c.global_batch / per_micro_step * c.micro_batch;
  MicroBatchRows rows{state.epoch, first, {}};
  std::vector<RowRun>& runs = rows.runs;
  BlockOrder::Placed block = order_->at(first);
  for (uint64_t position = first, left = c.micro_batch; left > 0;) {
    if (position >= block.start + static_cast<uint64_t>(block.block.rows)) block = order_->after(block);
    const int64_t offset = static_cast<int64_t>(position - block.start);
    const int64_t take = std::min<int64_t>(static_cast<int64_t>(left), block.block.rows - offset);
    runs.push_back({block.block, block.block.row + offset, take});
    position += static_cast<uint64_t>(take);
    left -= static_cast<uint64_t>(take);
  }
  state.position += per_micro_step;
  return rows;
}

std::vector<uint64_t> DistributedSampler::next_ids(SamplerState& state) const {
  std::vector<uint64_t> ids;
  for (const RowRun& run : next(state).runs)
    for (int64_t r = 0; r < run.count; ++r) ids.push_back(config_.layout.sequence_id(run.block.shard, run.row + r));
  return ids;
}

}  // namespace joule::data
