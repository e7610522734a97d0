// The prefetching loader: a background thread turns this rank's share of the global shuffle into
// ready batches (tensors) in a bounded queue, recording how long the trainer waited. Resumable from a
// SamplerState: a loader started at a saved state yields exactly the batches an uninterrupted one
// would have, also on another world size when the state sits on a global-step boundary.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>

#include "data/batch.h"
#include "data/dataset.h"
#include "data/shuffle.h"

namespace joule::data {

struct LoaderOptions {
  int prefetch = 4;          // ready batches kept ahead
  int max_open_shards = 16;  // shard files kept open (least recently used closed first)
};

class Loader {
 public:
  Loader(const Dataset& dataset, const SamplerConfig& sampler, SamplerState start, LoaderOptions options = {});
  ~Loader();
  Loader(const Loader&) = delete;
  Loader& operator=(const Loader&) = delete;

  // This rank's next micro-batch; rethrows a read error from the background thread.
  PretrainingBatch next();
  // The position after the batches next() has returned: what a checkpoint stores.
  SamplerState state() const { return state_; }
  double wait_seconds() const { return wait_seconds_; }
  const DistributedSampler& sampler() const { return sampler_; }
  // Closes the open shard files before the next read, so that reads open them again (fault injection:
  // a shard that goes bad on disk mid-run).
  void reopen_shards();

  // A host batch (data/row_reader.h) as the model's tensors.
  static PretrainingBatch to_tensors(const HostBatch& batch);

 private:
  void run(SamplerState state);

  const Dataset& dataset_;
  DistributedSampler sampler_;
  LoaderOptions options_;
  SamplerState state_;
  double wait_seconds_ = 0;

  struct Ready {
    PretrainingBatch batch;
    SamplerState after;
  };
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Ready> queue_;
  std::exception_ptr error_;
  bool stop_ = false;
  bool reopen_ = false;
  std::thread thread_;
};

}  // namespace joule::data
