// What `joule serve` counts, in Prometheus's text format (GET /metrics): requests by status code, errors by kind,
// inferences, the latency of a request split into its queue wait and its batch's forward pass, the batch size, the
// queue's depth, the rate of the last seconds, the energy meter's joules by component and source, and what is served
// (joule_model_info: `joule bench serve --url` reads the precision and batching there).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace joule::serve {

// A Prometheus histogram: cumulative bucket counts, sum and count.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // The lines of `name` (with its # HELP and # TYPE).
  std::string text(const std::string& name, const std::string& help) const;

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket (not cumulative), the last one +Inf
  double sum_ = 0;
  int64_t count_ = 0;
};

struct EnergyReading {
  std::string component, source;
  double joules = 0;
};

class Metrics {
 public:
  Metrics();
  // The labels of joule_model_info (the model, its precision and threads, the batcher's settings), a series of value 1.
  void describe(const std::map<std::string, std::string>& labels);
  void request(int status, const std::string& error_kind);  // error_kind "" for a success
  void answered(int64_t inferences, double queue_s, double compute_s, double total_s);
  void batch(int64_t examples, int64_t tokens, int64_t padded_tokens);
  // The whole text; queue depth and energy are read at the time of the scrape.
  std::string text(int64_t queued_examples, const std::vector<EnergyReading>& energy);

 private:
  using Clock = std::chrono::steady_clock;
  std::mutex mutex_;
  std::map<int, int64_t> requests_;        // by status code
  std::map<std::string, int64_t> errors_;  // by kind
  std::map<std::string, std::string> info_;
  int64_t inferences_ = 0, batches_ = 0, tokens_ = 0, padded_tokens_ = 0;
  Histogram queue_, compute_, request_, batch_size_;
  std::deque<std::pair<Clock::time_point, int64_t>> recent_;  // answered inferences of the last window
};

}  // namespace joule::serve
