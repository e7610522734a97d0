#include "data/shuffle.h"

#include <stdexcept>
#include <string>

#include "data/data_error.h"
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
    uint64_t next = left ^ (mix64(right ^ key) & half_mask_);
    left = right;
    right = next;
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
  steps_per_epoch_ = c.num_sequences / c.global_batch;
  if (steps_per_epoch_ == 0)
    bad("the dataset's " + std::to_string(c.num_sequences) + " sequences do not fill one global batch of " +
        std::to_string(c.global_batch));
}

std::vector<uint64_t> DistributedSampler::next(SamplerState& state) const {
  const uint64_t usable = steps_per_epoch_ * config_.global_batch;
  if (state.position >= usable) {  // the dropped remainder: move to the next epoch
    ++state.epoch;
    state.position = 0;
  }
  if (cached_epoch_ != state.epoch) {
    permutation_ = Permutation(config_.num_sequences, config_.seed, state.epoch);
    cached_epoch_ = state.epoch;
  }
  std::vector<uint64_t> ids(config_.micro_batch);
  const uint64_t first = state.position + static_cast<uint64_t>(config_.rank) * config_.micro_batch;
  for (uint64_t j = 0; j < config_.micro_batch; ++j) ids[j] = permutation_(first + j);
  state.position += config_.micro_batch * static_cast<uint64_t>(config_.world_size);
  return ids;
}

}  // namespace joule::data
