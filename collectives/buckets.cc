#include "collectives/buckets.h"

#include <algorithm>
#include <map>

namespace joule::collectives {

std::vector<std::vector<size_t>> plan_buckets(const std::vector<int64_t>& parameter_bytes, size_t bucket_bytes,
                                              size_t first_bucket_bytes, const std::vector<int>& kinds) {
  struct Bucket {
    std::vector<size_t> params;
    size_t bytes = 0, last = 0;  // `last`: when its newest parameter came (count of parameters taken before it)
  };
  std::map<int, Bucket> open;  // per kind, the bucket being filled
  std::vector<Bucket> closed;
  size_t taken = 0;
  for (size_t k = parameter_bytes.size(); k-- > 0; ++taken) {
    const size_t pb = static_cast<size_t>(parameter_bytes[k]);
    Bucket& b = open[kinds.empty() ? 0 : kinds.at(k)];
    const size_t limit = closed.empty() ? first_bucket_bytes : bucket_bytes;
    if (!b.params.empty() && b.bytes + pb > limit) {
      closed.push_back(std::move(b));
      b = Bucket{};
    }
    b.params.push_back(k);
    b.bytes += pb;
    b.last = taken;
  }
  for (auto& [kind, b] : open)
    if (!b.params.empty()) closed.push_back(std::move(b));
  // Launch order: the order in which backward completes them (one kind: the order they filled).
  std::stable_sort(closed.begin(), closed.end(), [](const Bucket& a, const Bucket& b) { return a.last < b.last; });
  std::vector<std::vector<size_t>> groups;
  for (Bucket& b : closed) groups.push_back(std::move(b.params));
  return groups;
}

int64_t shard_block(int64_t elements, int world_size) {
  const int64_t unit = 16 * static_cast<int64_t>(world_size);
  return (elements + unit - 1) / unit * 16;
}

std::vector<ShardRange> plan_shard_ranges(const std::vector<int64_t>& parameter_elements,
                                          const std::vector<std::vector<size_t>>& groups, int world_size, int rank) {
  std::vector<ShardRange> ranges(parameter_elements.size());
  for (const auto& group : groups) {
    int64_t elements = 0;
    for (size_t k : group) elements += parameter_elements[k];
    const int64_t block = shard_block(elements, world_size), mine = block * rank;
    int64_t offset = 0;
    for (size_t k : group) {
      const int64_t n = parameter_elements[k];
      ranges[k] = {std::clamp<int64_t>(mine - offset, 0, n), std::clamp<int64_t>(mine + block - offset, 0, n)};
      offset += n;
    }
  }
  return ranges;
}

}  // namespace joule::collectives
