#include "tools/bench_data.h"

#include <sys/resource.h>

#include <chrono>
#include <cstdio>

#include <nlohmann/json.hpp>

#include "data/dataset.h"
#include "data/loader.h"

namespace joule::tools {

std::string bench_data(const BenchDataOptions& o) {
  const std::string spec = data::data_create_split(o.data, "train");
  const data::Dataset dataset = data::Dataset::open(spec);
  const uint64_t global_batch =
      static_cast<uint64_t>(o.global_batch > 0 ? o.global_batch : o.micro_batch * o.world_size);
  data::SamplerConfig sc{dataset.block_layout(), global_batch, static_cast<uint64_t>(o.micro_batch),
                         o.world_size,           o.rank,       1};
  data::Loader loader(dataset, sc, {});
  for (int i = 0; i < o.warmup; ++i) loader.next();
  const double waited_before = loader.wait_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  int64_t sequences = 0;
  for (int i = 0; i < o.batches; ++i) sequences += loader.next().sequence_count();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double seq_per_s = sequences / seconds;
  struct rusage usage {};
  getrusage(RUSAGE_SELF, &usage);
  const double peak_rss_mb = static_cast<double>(usage.ru_maxrss) / 1024.0;
  const std::string order = dataset.block_layout().order_name();
  nlohmann::json j = {{"sequences", sequences},
                      {"seconds", seconds},
                      {"seq_per_s", seq_per_s},
                      {"shards", dataset.shards().size()},
                      {"dataset_sequences", dataset.size()},
                      {"order", order},
                      {"block_rows", dataset.block_rows()},
                      {"micro_batch", o.micro_batch},
                      {"global_batch", global_batch},
                      {"world_size", o.world_size},
                      {"rank", o.rank},
                      {"peak_rss_mb", peak_rss_mb},
                      {"wait_s", loader.wait_seconds() - waited_before}};
  if (o.json) return j.dump() + "\n";
  char line[512];
  std::snprintf(line, sizeof line,
                "loader: %lld sequences in %.2f s -> %.0f seq/s for rank %d of %d (%lld sequences in %zu shard(s), "
                "shuffled in %s; micro-batch %lld, global batch %llu); peak RSS %.0f MB\n",
                static_cast<long long>(sequences), seconds, seq_per_s, o.rank, o.world_size,
                static_cast<long long>(dataset.size()), dataset.shards().size(), order.c_str(),
                static_cast<long long>(o.micro_batch), static_cast<unsigned long long>(global_batch), peak_rss_mb);
  return line;
}

}  // namespace joule::tools
