// `joule bench serve`'s load: an open-loop generator of Open Inference Protocol requests against a server, and the
// server's own figures read from its /metrics. Open loop: request k is due at a time drawn before the run (Poisson
// arrivals at the offered rate), whatever became of the others, and its latency counts from that time, so a server
// (or a client) that falls behind shows it in the latency instead of slowing the arrivals down. No LibTorch.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace joule::serve {

struct Endpoint {
  std::string host = "127.0.0.1";
  int port = 8000;
};

// "http://HOST:PORT" (a trailing '/' allowed) as an endpoint; joule::UsageError naming the text otherwise.
Endpoint parse_url(const std::string& url);

struct LoadOptions {
  Endpoint server;
  std::string path;                 // the infer route, /v2/models/NAME/infer
  std::vector<std::string> bodies;  // request bodies, sent in turn
  double rate = 10;                 // offered requests per second
  double seconds = 10;              // arrivals drawn over this long
  int connections = 64;             // keep-alive connections, one request in flight on each
  double timeout_s = 60;            // a request unanswered this long counts as an error
  uint64_t seed = 1;
};

struct LoadResult {
  double offered_per_s = 0;
  int64_t sent = 0, answered = 0;             // answered: 200 with outputs
  std::map<std::string, int64_t> errors;      // "http 503", "connection: ...", "no outputs"
  double achieved_per_s = 0;                  // answered / (the last answer's time from the first arrival)
  double p50_ms = 0, p90_ms = 0, p99_ms = 0;  // of answered requests, from their due time
  int64_t late = 0;  // requests sent over 10 ms after their due time: every connection was busy
  int64_t error_count() const;
};

// Arrival times (seconds from the start) of a Poisson process at `rate` over `seconds`: exponential gaps, seeded.
std::vector<double> poisson_arrivals(double rate, double seconds, uint64_t seed);

// Sends opts.bodies in turn at Poisson arrivals and waits for every answer.
LoadResult run_load(const LoadOptions& options);

// The server's metrics (GET /metrics, Prometheus text): each series as written, labels included
// ("joule_energy_joules_total{component=\"cpu\",source=\"model\"}"), to its value; joule::IoError when unreachable.
std::map<std::string, double> scrape_metrics(const Endpoint& server);
// Prometheus text as scrape_metrics returns it (comments skipped).
std::map<std::string, double> parse_metrics(const std::string& text);
// The sum of the series whose name (before any '{') is `name`.
double metric_sum(const std::map<std::string, double>& metrics, const std::string& name);
// A series' labels ("name{a=\"x\",b=\"y\"}": {a: x, b: y}).
std::map<std::string, std::string> series_labels(const std::string& series);
// The labels of the first series named `name`, as a map ({} when there is none).
std::map<std::string, std::string> metric_labels(const std::map<std::string, double>& metrics, const std::string& name);

}  // namespace joule::serve
