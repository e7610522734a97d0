#include "data/loader.h"

#include <chrono>

#include "data/row_reader.h"
#include "launch/util/error.h"

namespace joule::data {
namespace {

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
