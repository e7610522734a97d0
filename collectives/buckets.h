// How gradients are grouped into all-reduce buckets: DDP's scheme, shared by the reducer (which builds the
// buffers) and the cluster performance model (which times them); and how ZeRO-1 cuts the buckets over the ranks.
// No LibTorch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace joule::collectives {

// Parameter indices per bucket, in launch order. Parameters are taken in reverse order (the order backward
// produces their gradients); a bucket closes when the next parameter would take it past its cap: the first
// bucket's cap is `first_bucket_bytes`, every later one's `bucket_bytes`. A parameter larger than a cap gets
// a bucket of its own.
// `kinds` (one per parameter, or empty for one kind): a bucket holds parameters of one kind only (ZeRO-1 keeps the
// bf16-gathered weights apart from the fp32 ones). Each kind fills a bucket of its own at a time (the first cap holds
// until one closes), and buckets launch in the order backward completes them: by their last parameter.
std::vector<std::vector<size_t>> plan_buckets(const std::vector<int64_t>& parameter_bytes, size_t bucket_bytes,
                                              size_t first_bucket_bytes, const std::vector<int>& kinds = {});

// ZeRO-1's cut of a bucket of `elements` elements: one block per rank, a multiple of 16 elements (64-byte aligned
// fp32) each, the last padded. The elements of one block per rank.
int64_t shard_block(int64_t elements, int world_size);

// The elements [begin, end) of a parameter (flattened) that a rank updates.
struct ShardRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// Per parameter (`parameter_elements`, in the order plan_buckets took), the part in rank `rank`'s block of its bucket
// when the buckets `groups` are cut for `world_size` ranks: what that rank updates under ZeRO-1 (possibly nothing).
std::vector<ShardRange> plan_shard_ranges(const std::vector<int64_t>& parameter_elements,
                                          const std::vector<std::vector<size_t>>& groups, int world_size, int rank);

}  // namespace joule::collectives
