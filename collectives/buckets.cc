#include "collectives/buckets.h"

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

}  // namespace joule::collectives
