// The global shuffle: a keyed bijection on [0, N) and the distributed sampler built on it.
//
// Choice: an exact permutation of all N sequences per epoch, computed on demand by a Feistel network
// with cycle-walking (O(1) memory for any N, e.g. 450,000,000), rather than a two-level
// file-then-window shuffle: every sequence can follow any other, whichever shard holds it, and the
// order does not depend on how the data was split into files or on the world size. Reads stay
// efficient because the loader sorts each prefetch window's rows by (shard, row) before reading.
#pragma once

#include <cstdint>
#include <vector>

namespace joule::data {

class Permutation {
 public:
  static constexpr int kRounds = 6;
  Permutation(uint64_t n, uint64_t seed, uint64_t epoch);
  uint64_t operator()(uint64_t index) const;  // index < size(); a bijection on [0, size())
  uint64_t size() const { return n_; }

 private:
  uint64_t feistel(uint64_t x) const;  // a bijection on [0, 2^(2*half_bits_))
  uint64_t n_;
  int half_bits_;
  uint64_t half_mask_;
  uint64_t keys_[kRounds];
};

// Which sequences each rank reads. A global step consumes `global_batch` consecutive positions of the
// epoch's permutation; within it, micro-step m gives rank r positions
// [m*W*b + r*b, m*W*b + (r+1)*b). Every rank therefore gets the same number of micro-batches
// (N mod global_batch sequences are dropped each epoch), and the set of sequences a global step
// trains on does not depend on the world size, so a run can resume on another world size.
struct SamplerConfig {
  uint64_t num_sequences = 0;
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

class DistributedSampler {
 public:
  explicit DistributedSampler(const SamplerConfig& config);  // throws SamplerError

  uint64_t steps_per_epoch() const { return steps_per_epoch_; }
  uint64_t accumulation() const { return accumulation_; }  // micro-batches per rank per step
  const SamplerConfig& config() const { return config_; }

  // The global sequence ids of this rank's next micro-batch; advances `state` by one micro-step.
  std::vector<uint64_t> next(SamplerState& state) const;

 private:
  SamplerConfig config_;
  uint64_t steps_per_epoch_ = 0, accumulation_ = 0;
  mutable uint64_t cached_epoch_ = ~0ull;
  mutable Permutation permutation_{1, 0, 0};
};

}  // namespace joule::data
