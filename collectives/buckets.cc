#include "collectives/buckets.h"

#include <algorithm>

namespace joule::collectives {

std::vector<std::vector<size_t>> plan_buckets(const std::vector<int64_t>& parameter_bytes, size_t bucket_bytes,
                                              size_t first_bucket_bytes) {
  std::vector<std::vector<size_t>> groups(1);
  size_t bytes = 0, limit = first_bucket_bytes;
  for (size_t k = parameter_bytes.size(); k-- > 0;) {
    const size_t pb = static_cast<size_t>(parameter_bytes[k]);
    if (!groups.back().empty() && bytes + pb > limit) {
      groups.emplace_back();
      bytes = 0;
      limit = bucket_bytes;
    }
    groups.back().push_back(k);
    bytes += pb;
  }
  if (groups.back().empty()) groups.pop_back();
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
