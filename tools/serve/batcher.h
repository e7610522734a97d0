// The dynamic batcher of `joule serve`: requests (each one or more examples) queue, and one worker runs them in
// batches. A batch closes when the queue holds --max-batch examples or its oldest request has waited
// --max-queue-delay-ms; it takes the oldest request and then the waiting requests nearest to it in length, whole, up to
// --max-batch examples, so that short requests are not padded to long ones while the queue has a choice. One batch runs
// at a time, on every core the process has. A full queue refuses new requests (the server answers 503) instead of
// growing without bound.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "models/infer/classifier.h"

namespace joule::serve {

using models::infer::Classifier;
using models::infer::Example;

struct BatcherOptions {
  int64_t max_batch = 8;  // examples a batch holds at most
  // How long the oldest request waits for company. 0 (Triton's default too): a batch takes what waited while the
  // last one ran. On 2 Zen 5 cores a bert-base batch of 2 takes 50 ms and of 1 28 ms, so waiting only adds latency:
  // at 8 and 12 requests/s, 60 s each, 5 ms gave p50 37-38 ms, 0 gave 33-37 (`joule bench serve`).
  double max_delay_s = 0;
  int64_t max_queue = 256;  // examples waiting at most; more are refused
  // true: the batcher runs the batches on a thread of its own; false: the owner runs work() on a thread it chooses
  // (joule serve: the one that loaded the model, see Server::serve).
  bool own_thread = true;
};

// What a request gets back: its examples' result objects (Classifier::classify's) in order, or the error the batch
// met; the time it waited and the batch's forward time.
struct Outcome {
  std::vector<nlohmann::json> objects;
  std::string error;  // non-empty: the batch failed
  double queue_seconds = 0, compute_seconds = 0;
  int64_t batch_examples = 0;
};

// One batch that ran: for the metrics.
struct BatchRecord {
  int64_t examples = 0, requests = 0, tokens = 0, padded_tokens = 0;
  double seconds = 0;
  bool failed = false;
};

class QueueFull : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Batcher {
 public:
  using Run = std::function<Classifier::Results(const std::vector<const Example*>&)>;
  Batcher(BatcherOptions options, Run run, std::function<void(const BatchRecord&)> on_batch = {});
  ~Batcher();  // finishes what is queued
  Batcher(const Batcher&) = delete;
  Batcher& operator=(const Batcher&) = delete;

  // Queues a request of 1..max_batch examples. QueueFull when the queue holds max_queue examples already;
  // std::invalid_argument for an empty request or one above max_batch (the server refuses those first).
  std::future<Outcome> submit(std::vector<Example> examples);

  // Examples waiting now.
  int64_t queued() const;

  // Runs everything queued, then stops the worker (work() returns). Requests submitted after it are refused
  // (QueueFull).
  void drain();

  // Runs the batches on the calling thread until drain() (options.own_thread false; the owner's worker).
  void work();

 private:
  using Clock = std::chrono::steady_clock;
  struct Request {
    std::vector<Example> examples;
    size_t length = 0;  // tokens of its longest example
    Clock::time_point arrived;
    std::promise<Outcome> promise;
  };
  std::vector<std::unique_ptr<Request>> next_batch(std::unique_lock<std::mutex>& lock);
  void run_batch(std::vector<std::unique_ptr<Request>> batch);

  const BatcherOptions options_;
  const Run run_;
  const std::function<void(const BatchRecord&)> on_batch_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::unique_ptr<Request>> queue_;
  int64_t queued_examples_ = 0;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace joule::serve
