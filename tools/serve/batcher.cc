#include "tools/serve/batcher.h"

#include <algorithm>
#include <exception>
#include <stdexcept>

namespace joule::serve {

Batcher::Batcher(BatcherOptions options, Run run, std::function<void(const BatchRecord&)> on_batch)
    : options_(options), run_(std::move(run)), on_batch_(std::move(on_batch)) {
  if (options_.max_batch < 1 || options_.max_queue < options_.max_batch || !(options_.max_delay_s >= 0))
    throw std::invalid_argument("batcher options: max_batch >= 1, max_queue >= max_batch, max_delay_s >= 0");
  if (options_.own_thread) worker_ = std::thread([this] { work(); });
}

Batcher::~Batcher() { drain(); }

std::future<Outcome> Batcher::submit(std::vector<Example> examples) {
  const auto n = static_cast<int64_t>(examples.size());
  if (n < 1 || n > options_.max_batch)
    throw std::invalid_argument("a request holds 1 to " + std::to_string(options_.max_batch) + " examples, not " +
                                std::to_string(n));
  auto request = std::make_unique<Request>();
  for (const Example& e : examples) request->length = std::max(request->length, e.ids.size());
  request->examples = std::move(examples);
  request->arrived = Clock::now();
  std::future<Outcome> future = request->promise.get_future();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) throw QueueFull("the server is shutting down");
    if (queued_examples_ + n > options_.max_queue)
      throw QueueFull("the queue holds " + std::to_string(queued_examples_) + " examples (at most " +
                      std::to_string(options_.max_queue) + ")");
    queued_examples_ += n;
    queue_.push_back(std::move(request));
  }
  wake_.notify_one();
  return future;
}

int64_t Batcher::queued() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return queued_examples_;
}

void Batcher::drain() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  if (worker_.joinable()) worker_.join();
}

// Waits until a batch is due (or the queue is empty and the batcher stops: an empty result), then takes it out of
// the queue: the oldest request, then the waiting ones nearest to its length, whole, while they fit.
std::vector<std::unique_ptr<Batcher::Request>> Batcher::next_batch(std::unique_lock<std::mutex>& lock) {
  for (;;) {
    if (queue_.empty()) {
      if (stopping_) return {};
      wake_.wait(lock);
      continue;
    }
    const Clock::time_point due = queue_.front()->arrived + std::chrono::duration_cast<Clock::duration>(
                                                                std::chrono::duration<double>(options_.max_delay_s));
    if (stopping_ || queued_examples_ >= options_.max_batch || Clock::now() >= due) break;
    wake_.wait_until(lock, due);
  }
  std::vector<std::unique_ptr<Request>> batch;
  batch.push_back(std::move(queue_.front()));
  queue_.pop_front();
  int64_t examples = static_cast<int64_t>(batch[0]->examples.size());
  const size_t length = batch[0]->length;
  // The others by distance in length, the older first among equals.
  std::vector<size_t> order(queue_.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  auto distance = [&](size_t k) {
    return queue_[k]->length > length ? queue_[k]->length - length : length - queue_[k]->length;
  };
  std::stable_sort(order.begin(), order.end(), [&](size_t x, size_t y) { return distance(x) < distance(y); });
  std::vector<bool> taken(queue_.size(), false);
  for (size_t k : order) {
    const auto n = static_cast<int64_t>(queue_[k]->examples.size());
    if (examples + n > options_.max_batch) continue;
    examples += n;
    taken[k] = true;
    if (examples == options_.max_batch) break;
  }
  std::deque<std::unique_ptr<Request>> rest;
  for (size_t k = 0; k < queue_.size(); ++k)
    if (taken[k])
      batch.push_back(std::move(queue_[k]));
    else
      rest.push_back(std::move(queue_[k]));
  queue_.swap(rest);
  queued_examples_ -= examples;
  return batch;
}

void Batcher::run_batch(std::vector<std::unique_ptr<Request>> batch) {
  std::vector<const Example*> examples;
  for (const auto& r : batch)
    for (const Example& e : r->examples) examples.push_back(&e);
  const Clock::time_point start = Clock::now();
  BatchRecord record{static_cast<int64_t>(examples.size()), static_cast<int64_t>(batch.size()), 0, 0, 0, false};
  std::string error;
  Classifier::Results results;
  try {
    results = run_(examples);
    if (results.objects.size() != examples.size()) throw std::logic_error("the batch returned a wrong count");
  } catch (const std::exception& e) {
    error = e.what();
  } catch (...) {
    error = "the batch failed";
  }
  const double compute = std::chrono::duration<double>(Clock::now() - start).count();
  record.tokens = results.tokens;
  record.padded_tokens = results.padded_tokens;
  record.seconds = compute;
  record.failed = !error.empty();
  if (on_batch_) on_batch_(record);
  size_t next = 0;
  for (auto& r : batch) {
    Outcome o;
    o.error = error;
    o.queue_seconds = std::chrono::duration<double>(start - r->arrived).count();
    o.compute_seconds = compute;
    o.batch_examples = record.examples;
    for (size_t k = 0; k < r->examples.size(); ++k, ++next)
      if (error.empty()) o.objects.push_back(std::move(results.objects[next]));
    r->promise.set_value(std::move(o));
  }
}

void Batcher::work() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    std::vector<std::unique_ptr<Request>> batch = next_batch(lock);
    if (batch.empty()) return;
    lock.unlock();
    run_batch(std::move(batch));
    lock.lock();
  }
}

}  // namespace joule::serve
