#include "data/loader.h"
#include "launch/util/error.h"

#include <chrono>
#include <deque>
#include <list>
#include <map>

namespace joule::data {
namespace {

// Keeps up to `capacity` shards open, closing the least recently used.
class ShardCache {
 public:
  ShardCache(const Dataset& d, size_t capacity) : dataset_(d), capacity_(std::max<size_t>(1, capacity)) {}
  ShardReader& get(size_t shard) {
    auto it = open_.find(shard);
    if (it != open_.end()) {
      order_.splice(order_.begin(), order_, it->second.second);
      return *it->second.first;
    }
    if (open_.size() >= capacity_) {
      open_.erase(order_.back());
      order_.pop_back();
    }
    dataset_.check_unchanged(shard);  // a shard replaced or edited since the data set was opened stops the job
    order_.push_front(shard);
    auto reader = std::make_unique<ShardReader>(dataset_.shards()[shard].path);
    return *open_.emplace(shard, std::make_pair(std::move(reader), order_.begin())).first->second.first;
  }
  void clear() {
    open_.clear();
    order_.clear();
  }

 private:
  const Dataset& dataset_;
  size_t capacity_;
  std::list<size_t> order_;
  std::map<size_t, std::pair<std::unique_ptr<ShardReader>, std::list<size_t>::iterator>> open_;
};

HostBatch read_with(ShardCache& cache, const Dataset& dataset, const std::vector<uint64_t>& ids) {
  HostBatch out;
  out.resize(static_cast<int64_t>(ids.size()), dataset.seq_len(), dataset.max_predictions(), dataset.pack());
  // Group by shard so each shard is read once, in row order, then place rows where they belong.
  std::map<size_t, std::vector<std::pair<int64_t, size_t>>> by_shard;  // shard -> (row, destination)
  for (size_t i = 0; i < ids.size(); ++i) {
    auto [shard, row] = dataset.locate(static_cast<int64_t>(ids[i]));
    by_shard[shard].emplace_back(row, i);
  }
  HostBatch tmp;
  for (auto& [shard, rows] : by_shard) {
    std::vector<int64_t> row_ids;
    for (const auto& r : rows) row_ids.push_back(r.first);
    tmp.resize(static_cast<int64_t>(rows.size()), dataset.seq_len(), dataset.max_predictions(), dataset.pack());
    cache.get(shard).read_rows(row_ids, tmp, 0);
    for (size_t k = 0; k < rows.size(); ++k)
      copy_row(tmp, static_cast<int64_t>(k), out, static_cast<int64_t>(rows[k].second));
  }
  return out;
}

// The blocks a rank reads, each inflated once: a micro-batch's runs of rows are copied out of their blocks, read
// whole the first time a run needs them. A rank walks its part of the stream in order: the block a micro-batch ends in
// is the one the next begins in, and no other block is read twice.
class BlockReader {
 public:
  BlockReader(const Dataset& d, size_t max_open_shards) : dataset_(d), shards_(d, max_open_shards) {}

  HostBatch read(const std::vector<RowRun>& runs) {
    int64_t rows = 0;
    for (const RowRun& run : runs) rows += run.count;
    HostBatch out;
    out.resize_for_overwrite(rows, dataset_.seq_len(), dataset_.max_predictions(), dataset_.pack());
    int64_t at = 0;
    for (const RowRun& run : runs) {
      const HostBatch& block = this->block(run.block);
      for (int64_t r = 0; r < run.count; ++r) copy_row(block, run.row - run.block.row + r, out, at++);
    }
    return out;
  }
  void clear() {
    shards_.clear();
    recent_.clear();
  }

 private:
  const HostBatch& block(const BlockLayout::Block& b) {
    for (const auto& [which, rows] : recent_)
      if (which == b) return rows;
    if (recent_.size() == 2) recent_.pop_front();
    recent_.emplace_back(b, HostBatch{});
    shards_.get(b.shard).read_range(b.row, b.rows, recent_.back().second);
    return recent_.back().second;
  }

  const Dataset& dataset_;
  ShardCache shards_;
  std::deque<std::pair<BlockLayout::Block, HostBatch>> recent_;
};

torch::Tensor to_long(const std::vector<int32_t>& v, std::vector<int64_t> shape) {
  return torch::from_blob(const_cast<int32_t*>(v.data()), shape, torch::kInt32).to(torch::kInt64);
}

}  // namespace

PretrainingBatch Loader::to_tensors(const HostBatch& b) {
  PretrainingBatch t;
  t.input_ids = to_long(b.input_ids, {b.rows, b.seq_len});
  t.attention_mask = to_long(b.input_mask, {b.rows, b.seq_len});
  t.token_type_ids = to_long(b.segment_ids, {b.rows, b.seq_len});
  t.masked_positions = to_long(b.masked_positions, {b.rows, b.max_predictions});
  t.masked_ids = to_long(b.masked_ids, {b.rows, b.max_predictions});
  if (b.pack > 0) {
    t.next_sentence_labels = to_long(b.next_sentence_labels, {b.rows, b.pack});
    t.sequence_lengths = to_long(b.sequence_lengths, {b.rows, b.pack});
    for (int64_t r = 0; r < b.rows; ++r) t.packed_sequences += b.sequences_in(r);
  } else {
    t.next_sentence_labels = to_long(b.next_sentence_labels, {b.rows});
  }
  return t;
}

HostBatch Loader::read_sequences(const Dataset& dataset, const std::vector<uint64_t>& ids) {
  ShardCache cache(dataset, 16);
  return read_with(cache, dataset, ids);
}

Loader::Loader(const Dataset& dataset, const SamplerConfig& sampler, SamplerState start, LoaderOptions options)
    : dataset_(dataset), sampler_(sampler), options_(options), state_(start) {
  if (static_cast<int64_t>(sampler.layout.sequences()) != dataset.size())
    throw joule::InternalError("loader: sampler covers " + std::to_string(sampler.layout.sequences()) +
                               " sequences but the dataset has " + std::to_string(dataset.size()));
  sampler_.begin_at(start);
  thread_ = std::thread([this, start] { run(start); });
}

Loader::~Loader() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  changed_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Loader::run(SamplerState state) {
  try {
    BlockReader blocks(dataset_, static_cast<size_t>(options_.max_open_shards));
    while (true) {
      bool reopen = false;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        changed_.wait(lock, [&] { return stop_ || static_cast<int>(queue_.size()) < options_.prefetch; });
        if (stop_) return;
        std::swap(reopen, reopen_);
      }
      if (reopen) blocks.clear();
      const MicroBatchRows rows = sampler_.next(state);
      Ready ready{to_tensors(blocks.read(rows.runs)), state};
      BatchRows& named = ready.batch.rows.emplace();
      named.seed = sampler_.config().seed;
      named.first_row = rows.first_row_index();
      named.sources = rows.runs;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        queue_.push_back(std::move(ready));
      }
      changed_.notify_all();
    }
  } catch (...) {
    std::lock_guard<std::mutex> lock(mutex_);
    error_ = std::current_exception();
    changed_.notify_all();
  }
}

void Loader::reopen_shards() {
  std::lock_guard<std::mutex> lock(mutex_);
  reopen_ = true;
}

PretrainingBatch Loader::next() {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return !queue_.empty() || error_; });
  wait_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (queue_.empty() && error_) std::rethrow_exception(error_);
  Ready ready = std::move(queue_.front());
  queue_.pop_front();
  lock.unlock();
  changed_.notify_all();
  state_ = ready.after;
  return std::move(ready.batch);
}

}  // namespace joule::data
