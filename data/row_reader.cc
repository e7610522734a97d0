#include "data/row_reader.h"

#include <algorithm>

namespace joule::data {

ShardCache::ShardCache(const Dataset& d, size_t capacity) : dataset_(d), capacity_(std::max<size_t>(1, capacity)) {}

ShardReader& ShardCache::get(size_t shard) {
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

void ShardCache::clear() {
  open_.clear();
  order_.clear();
}

HostBatch read_sequences(const Dataset& dataset, const std::vector<uint64_t>& ids) {
  ShardCache cache(dataset, 16);
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

HostBatch BlockReader::read(const std::vector<RowRun>& runs) {
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

void BlockReader::clear() {
  shards_.clear();
  recent_.clear();
}

const HostBatch& BlockReader::block(const BlockLayout::Block& b) {
  for (const auto& [which, rows] : recent_)
    if (which == b) return rows;
  if (recent_.size() == 2) recent_.pop_front();
  recent_.emplace_back(b, HostBatch{});
  shards_.get(b.shard).read_range(b.row, b.rows, recent_.back().second);
  return recent_.back().second;
}

}  // namespace joule::data
