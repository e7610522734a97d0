#include "tools/serve/load.h"

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>
#include <random>
#include <regex>
#include <sstream>
#include <thread>

#include "launch/util/error.h"
#include "tools/stats.h"

namespace joule::serve {
namespace {

using Clock = std::chrono::steady_clock;

// Of the answered requests' latencies; 0 when none was answered.
double percentile_ms(const std::vector<double>& seconds, double q) {
  return seconds.empty() ? 0 : tools::percentile(seconds, q) * 1e3;
}

// What one connection saw: its answered latencies and its errors by kind.
struct Tally {
  std::vector<double> latency_s;
  std::map<std::string, int64_t> errors;
  double last_answer_s = 0;
  int64_t late = 0;
};

}  // namespace

int64_t LoadResult::error_count() const {
  int64_t n = 0;
  for (const auto& e : errors) n += e.second;
  return n;
}

Endpoint parse_url(const std::string& url) {
  std::smatch m;
  if (!std::regex_match(url, m, std::regex(R"(http://([A-Za-z0-9.\-]+|\[[0-9A-Fa-f:]+\]):([0-9]{1,5})/?)")))
    throw joule::UsageError("--url '" + url + "' is not http://HOST:PORT",
                            "give the address `joule serve` printed, e.g. http://127.0.0.1:8000");
  Endpoint e;
  e.host = m[1].str();
  if (e.host.front() == '[') e.host = e.host.substr(1, e.host.size() - 2);
  e.port = std::stoi(m[2].str());
  if (e.port < 1 || e.port > 65535)
    throw joule::UsageError("--url '" + url + "': port " + m[2].str() + " is not 1-65535");
  return e;
}

std::vector<double> poisson_arrivals(double rate, double seconds, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::exponential_distribution<double> gap(rate);
  std::vector<double> at;
  for (double t = gap(rng); t < seconds; t += gap(rng)) at.push_back(t);
  return at;
}

LoadResult run_load(const LoadOptions& o) {
  if (o.bodies.empty()) throw joule::InternalError("run_load: no request bodies");
  const std::vector<double> due = poisson_arrivals(o.rate, o.seconds, o.seed);
  std::atomic<size_t> next{0};
  std::vector<Tally> tallies(static_cast<size_t>(std::max(1, o.connections)));
  const Clock::time_point start = Clock::now() + std::chrono::milliseconds(20);  // every connection ready first
  const auto since_start = [&start] { return std::chrono::duration<double>(Clock::now() - start).count(); };
  const auto timeout = std::chrono::duration<double>(o.timeout_s);
  std::vector<std::thread> threads;
  for (Tally& tally : tallies)
    threads.emplace_back([&, t = &tally] {
      httplib::Client client(o.server.host, o.server.port);
      client.set_keep_alive(true);
      client.set_tcp_nodelay(true);
      client.set_connection_timeout(std::chrono::duration_cast<std::chrono::microseconds>(timeout));
      client.set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(timeout));
      client.set_write_timeout(std::chrono::duration_cast<std::chrono::microseconds>(timeout));
      for (size_t k = next++; k < due.size(); k = next++) {
        std::this_thread::sleep_until(
            start + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(due[k])));
        if (since_start() - due[k] > 0.010) ++t->late;
        const std::string& body = o.bodies[k % o.bodies.size()];
        const httplib::Result res = client.Post(o.path.c_str(), body, "application/json");
        const double answered_at = since_start();
        if (!res) {
          ++t->errors["connection: " + httplib::to_string(res.error())];
        } else if (res->status != 200) {
          ++t->errors["http " + std::to_string(res->status)];
        } else if (res->body.find("\"outputs\"") == std::string::npos) {
          ++t->errors["200 without outputs"];
        } else {
          t->latency_s.push_back(answered_at - due[k]);
          t->last_answer_s = std::max(t->last_answer_s, answered_at);
        }
      }
    });
  for (std::thread& t : threads) t.join();

  LoadResult r;
  r.offered_per_s = o.rate;
  r.sent = static_cast<int64_t>(due.size());
  std::vector<double> latency;
  double last = 0;
  for (const Tally& t : tallies) {
    latency.insert(latency.end(), t.latency_s.begin(), t.latency_s.end());
    for (const auto& [kind, n] : t.errors) r.errors[kind] += n;
    last = std::max(last, t.last_answer_s);
    r.late += t.late;
  }
  r.answered = static_cast<int64_t>(latency.size());
  // Over the arrivals' window at least: a server that keeps up answers the last request just after it arrives.
  const double span = std::max(last, o.seconds);
  r.achieved_per_s = span > 0 ? static_cast<double>(r.answered) / span : 0;
  r.p50_ms = percentile_ms(latency, 0.50);
  r.p90_ms = percentile_ms(latency, 0.90);
  r.p99_ms = percentile_ms(latency, 0.99);
  return r;
}

std::map<std::string, double> parse_metrics(const std::string& text) {
  std::map<std::string, double> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    try {
      out[line.substr(0, space)] = std::stod(line.substr(space + 1));
    } catch (const std::exception&) {
      // "+Inf" bucket bounds are in the labels; a value that is not a number is not a figure this reads
    }
  }
  return out;
}

std::map<std::string, double> scrape_metrics(const Endpoint& server) {
  httplib::Client client(server.host, server.port);
  client.set_read_timeout(std::chrono::seconds(30));
  const httplib::Result res = client.Get("/metrics");
  const std::string where = "http://" + server.host + ":" + std::to_string(server.port) + "/metrics";
  if (!res) throw joule::IoError(where + ": " + httplib::to_string(res.error()), "is `joule serve` running there?");
  if (res->status != 200)
    throw joule::IoError(where + ": HTTP " + std::to_string(res->status), "is it `joule serve` that answers there?");
  return parse_metrics(res->body);
}

double metric_sum(const std::map<std::string, double>& metrics, const std::string& name) {
  double sum = 0;
  for (const auto& [series, value] : metrics)
    if (series == name || series.rfind(name + "{", 0) == 0) sum += value;
  return sum;
}

std::map<std::string, std::string> series_labels(const std::string& series) {
  std::map<std::string, std::string> labels;
  const size_t open = series.find('{');
  if (open == std::string::npos) return labels;
  static const std::regex pair(R"re(([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)")re");
  for (std::sregex_iterator it(series.begin() + static_cast<long>(open), series.end(), pair), end; it != end; ++it)
    labels[(*it)[1].str()] = (*it)[2].str();
  return labels;
}

std::map<std::string, std::string> metric_labels(const std::map<std::string, double>& metrics,
                                                 const std::string& name) {
  for (const auto& [series, value] : metrics)
    if (series.rfind(name + "{", 0) == 0) return series_labels(series);
  return {};
}

}  // namespace joule::serve
