#include "tools/serve/metrics.h"

#include <cstdio>

namespace joule::serve {
namespace {

constexpr double kRateWindowSeconds = 10;

std::string number(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.9g", v);
  return text;
}

std::string header(const std::string& name, const char* type, const std::string& help) {
  return "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

std::vector<double> latency_bounds() {  // seconds: 1 ms to 10 s
  return {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2.5, 5, 10};
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  size_t k = 0;
  while (k < bounds_.size() && value > bounds_[k]) ++k;
  ++counts_[k];
  sum_ += value;
  ++count_;
}

std::string Histogram::text(const std::string& name, const std::string& help) const {
  std::string s = header(name, "histogram", help);
  int64_t cumulative = 0;
  for (size_t k = 0; k <= bounds_.size(); ++k) {
    cumulative += counts_[k];
    s += name + "_bucket{le=\"" + (k < bounds_.size() ? number(bounds_[k]) : "+Inf") + "\"} " +
         std::to_string(cumulative) + "\n";
  }
  return s + name + "_sum " + number(sum_) + "\n" + name + "_count " + std::to_string(count_) + "\n";
}

Metrics::Metrics()
    : queue_(latency_bounds()),
      compute_(latency_bounds()),
      request_(latency_bounds()),
      batch_size_({1, 2, 4, 8, 16, 32, 64, 128, 256}) {}

void Metrics::request(int status, const std::string& error_kind) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++requests_[status];
  if (!error_kind.empty()) ++errors_[error_kind];
}

void Metrics::answered(int64_t inferences, double queue_s, double compute_s, double total_s) {
  std::lock_guard<std::mutex> lock(mutex_);
  inferences_ += inferences;
  queue_.observe(queue_s);
  compute_.observe(compute_s);
  request_.observe(total_s);
  recent_.emplace_back(Clock::now(), inferences);
}

void Metrics::batch(int64_t examples, int64_t tokens, int64_t padded_tokens) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++batches_;
  tokens_ += tokens;
  padded_tokens_ += padded_tokens;
  batch_size_.observe(static_cast<double>(examples));
}

void Metrics::describe(const std::map<std::string, std::string>& labels) {
  std::lock_guard<std::mutex> lock(mutex_);
  info_ = labels;
}

std::string Metrics::text(int64_t queued_examples, const std::vector<EnergyReading>& energy) {
  std::lock_guard<std::mutex> lock(mutex_);
  const Clock::time_point now = Clock::now();
  while (!recent_.empty() && now - recent_.front().first > std::chrono::duration<double>(kRateWindowSeconds))
    recent_.pop_front();
  int64_t recent = 0;
  for (const auto& r : recent_) recent += r.second;
  std::string s;
  if (!info_.empty()) {
    s += header("joule_model_info", "gauge", "what this server serves and how (value 1)") + "joule_model_info{";
    for (auto it = info_.begin(); it != info_.end(); ++it)
      s += (it == info_.begin() ? "" : ",") + it->first + "=\"" + it->second + "\"";
    s += "} 1\n";
  }
  s += header("joule_requests_total", "counter", "inference requests answered, by HTTP status code");
  for (const auto& [code, n] : requests_)
    s += "joule_requests_total{code=\"" + std::to_string(code) + "\"} " + std::to_string(n) + "\n";
  s += header("joule_request_errors_total", "counter",
              "requests refused or failed, by kind (bad_request, no_length, too_large, overloaded, not_found, failed)");
  for (const auto& [kind, n] : errors_)
    s += "joule_request_errors_total{kind=\"" + kind + "\"} " + std::to_string(n) + "\n";
  s += header("joule_inferences_total", "counter", "examples classified") + "joule_inferences_total " +
       std::to_string(inferences_) + "\n";
  s += header("joule_batches_total", "counter", "forward passes run") + "joule_batches_total " +
       std::to_string(batches_) + "\n";
  s += header("joule_tokens_total", "counter", "real tokens the batches carried") + "joule_tokens_total " +
       std::to_string(tokens_) + "\n";
  s += header("joule_padded_tokens_total", "counter", "token positions the batches computed (real and padding)") +
       "joule_padded_tokens_total " + std::to_string(padded_tokens_) + "\n";
  s += queue_.text("joule_queue_seconds", "time a request waited in the batcher's queue");
  s += compute_.text("joule_compute_seconds", "the forward pass of the batch a request ran in");
  s += request_.text("joule_request_seconds", "a request from its arrival to its answer");
  s += batch_size_.text("joule_batch_examples", "examples a batch held");
  s += header("joule_queue_examples", "gauge", "examples waiting in the queue") + "joule_queue_examples " +
       std::to_string(queued_examples) + "\n";
  s += header("joule_inferences_per_second", "gauge", "examples answered per second over the last 10 seconds") +
       "joule_inferences_per_second " + number(static_cast<double>(recent) / kRateWindowSeconds) + "\n";
  s += header("joule_energy_joules_total", "counter",
              "IT energy since the server started, by component and source (model: the instance profile's watts)");
  for (const EnergyReading& e : energy)
    s += "joule_energy_joules_total{component=\"" + e.component + "\",source=\"" + e.source + "\"} " +
         number(e.joules) + "\n";
  return s;
}

}  // namespace joule::serve
