// `joule bench data`: the loader's throughput, as a function main() only calls.
#pragma once

#include <cstdint>
#include <string>

namespace joule::tools {

// `joule bench data`: sequences/s the prefetching loader delivers to one rank from the shards under the global
// shuffle, after `warmup` batches; one JSON object when `json`, else a line of text.
struct BenchDataOptions {
  std::string data;  // shard directory, glob, list file or `joule data create` output
  int64_t micro_batch = 32;
  int64_t global_batch = 0;      // 0: micro_batch x world_size
  int world_size = 1, rank = 0;  // the rank whose part of each step is read
  int batches = 200, warmup = 10;
  bool json = false;
};
std::string bench_data(const BenchDataOptions& options);

}  // namespace joule::tools
