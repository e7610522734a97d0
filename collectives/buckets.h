// How gradients are grouped into all-reduce buckets: DDP's scheme, shared by the reducer (which builds the
// buffers) and the cluster performance model (which times them). No LibTorch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace joule::collectives {

// Parameter indices per bucket, in launch order. Parameters are taken in reverse order (the order backward
// produces their gradients); a bucket closes when the next parameter would take it past its cap: the first
// bucket's cap is `first_bucket_bytes`, every later one's `bucket_bytes`. A parameter larger than a cap gets
// a bucket of its own.
std::vector<std::vector<size_t>> plan_buckets(const std::vector<int64_t>& parameter_bytes, size_t bucket_bytes,
                                              size_t first_bucket_bytes);

}  // namespace joule::collectives
