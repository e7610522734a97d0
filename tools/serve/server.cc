#include "tools/serve/server.h"

#include <netinet/in.h>
#include <strings.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <exception>
#include <filesystem>

#include <httplib.h>
#include <nlohmann/json.hpp>

namespace joule::serve {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

void answer(httplib::Response& res, int status, const json& body) {
  res.status = status;
  res.set_content(dump(body) + "\n", "application/json");
}

// Whether cpp-httplib reads the body as chunks: its own test, the whole header value equal to "chunked" in any case.
bool chunked(const httplib::Request& req) {
  return strcasecmp(req.get_header_value("Transfer-Encoding").c_str(), "chunked") == 0;
}

std::string error_kind(int status) {
  switch (status) {
    case 400:
      return "bad_request";
    case 404:
      return "not_found";
    case 411:
      return "no_length";
    case 413:
      return "too_large";
    case 503:
      return "overloaded";
    default:
      return status >= 500 ? "failed" : "other";
  }
}

// cpp-httplib 0.11 listens with a backlog of 5: under 1,000 connections at once the kernel dropped SYNs and clients
// waited a second per retry. listen() again on the bound socket (found by its port: the library keeps it private)
// raises the backlog to the system's limit (net.core.somaxconn).
void deepen_backlog(int port) {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    int fd = -1;
    try {
      fd = std::stoi(entry.path().filename().string());
    } catch (const std::exception&) {
      continue;
    }
    int accepting = 0;
    socklen_t size = sizeof accepting;
    if (getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &accepting, &size) != 0 || !accepting) continue;
    sockaddr_storage address{};
    socklen_t length = sizeof address;
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) continue;
    const int bound = address.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&address)->sin6_port)
                                                    : ntohs(reinterpret_cast<sockaddr_in*>(&address)->sin_port);
    if (bound == port) {
      ::listen(fd, SOMAXCONN);
      return;
    }
  }
}

// The options with the batches run by serve()'s caller (see Server::serve).
ServerOptions run_on_serving_thread(ServerOptions options) {
  options.batcher.own_thread = false;
  return options;
}

}  // namespace

struct Server::Impl {
  Impl(ServerOptions o, ModelShape m, Classifier& c, std::function<std::vector<EnergyReading>()> e)
      : options(std::move(o)),
        model(std::move(m)),
        energy(std::move(e)),
        batcher(
            options.batcher, [&c](const std::vector<const Example*>& batch) { return c.classify(batch); },
            [this](const BatchRecord& b) { metrics.batch(b.examples, b.tokens, b.padded_tokens); }),
        classifier(c) {
    const auto whole = [](double v) { return std::to_string(static_cast<int64_t>(v)); };
    metrics.describe({{"model", model.name},
                      {"architecture", model.architecture},
                      {"precision", c.precision()},
                      {"threads", std::to_string(c.threads())},
                      {"max_batch", std::to_string(options.batcher.max_batch)},
                      {"max_queue_delay_ms", whole(options.batcher.max_delay_s * 1e3 + 0.5)}});
  }

  // The 404 of a route whose {name} is not this server's model, or "" when it is.
  std::string unknown_model(const httplib::Request& req) const {
    if (req.matches[1] == model.name) return "";
    return "unknown model '" + req.matches[1].str() + "'; this server serves '" + model.name + "'";
  }

  void error(httplib::Response& res, int status, const std::string& what) {
    answer(res, status, {{"error", what}});
    metrics.request(status, error_kind(status));
  }

  // POST /v2/models/{name}/infer
  void infer(const httplib::Request& req, httplib::Response& res) {
    const Clock::time_point arrived = Clock::now();
    if (const std::string unknown = unknown_model(req); !unknown.empty()) return error(res, 404, unknown);
    std::vector<Example> examples;
    json body;
    try {
      body = parse_request(req.body, req.get_header_value("Inference-Header-Content-Length"));
      const std::vector<json> objects = request_examples(body, model);
      (void)requested_outputs(body, model);  // an unknown output is refused before any work
      for (size_t k = 0; k < objects.size(); ++k) {
        try {
          examples.push_back(classifier.read(objects[k]));
        } catch (const models::infer::InputError& e) {
          throw BadRequest("example " + std::to_string(k) + ": " + e.what());
        }
        examples.back().line = static_cast<int64_t>(k);
      }
    } catch (const BadRequest& e) {
      return error(res, 400, e.what());
    }
    const auto n = static_cast<int64_t>(examples.size());
    std::future<Outcome> future;
    try {
      future = batcher.submit(std::move(examples));
    } catch (const QueueFull& e) {
      res.set_header("Retry-After", "1");
      return error(res, 503, std::string("overloaded: ") + e.what() + "; retry later");
    }
    Outcome outcome = future.get();
    if (!outcome.error.empty()) return error(res, 500, "the batch failed: " + outcome.error);
    answer(res, 200, response(body, model, outcome.objects));
    metrics.request(200, "");
    metrics.answered(n, outcome.queue_seconds, outcome.compute_seconds,
                     std::chrono::duration<double>(Clock::now() - arrived).count());
  }

  void model_route(const httplib::Request& req, httplib::Response& res, bool ready) {
    if (const std::string unknown = unknown_model(req); !unknown.empty()) return answer(res, 404, {{"error", unknown}});
    if (ready) return answer(res, stopping ? 503 : 200, {{"name", model.name}, {"ready", !stopping.load()}});
    answer(res, 200, model_metadata(model));
  }

  void routes() {
    http.Get("/v2/health/live", [](const httplib::Request&, httplib::Response& res) {
      answer(res, 200, {{"live", true}});
    });
    http.Get("/v2/health/ready", [this](const httplib::Request&, httplib::Response& res) {
      answer(res, stopping ? 503 : 200, {{"ready", !stopping.load()}});
    });
    http.Get("/v2", [this](const httplib::Request&, httplib::Response& res) {
      answer(res, 200, server_metadata(options.version));
    });
    http.Get(R"(/v2/models/([^/]+))",
             [this](const httplib::Request& q, httplib::Response& s) { model_route(q, s, false); });
    http.Get(R"(/v2/models/([^/]+)/versions/1)",
             [this](const httplib::Request& q, httplib::Response& s) { model_route(q, s, false); });
    http.Get(R"(/v2/models/([^/]+)/ready)",
             [this](const httplib::Request& q, httplib::Response& s) { model_route(q, s, true); });
    http.Get(R"(/v2/models/([^/]+)/versions/1/ready)",
             [this](const httplib::Request& q, httplib::Response& s) { model_route(q, s, true); });
    http.Post(R"(/v2/models/([^/]+)/infer)", [this](const httplib::Request& q, httplib::Response& s) { infer(q, s); });
    http.Post(R"(/v2/models/([^/]+)/versions/1/infer)",
              [this](const httplib::Request& q, httplib::Response& s) { infer(q, s); });
    http.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics.text(batcher.queued(), energy ? energy() : std::vector<EnergyReading>{}),
                      "text/plain; version=0.0.4");
    });
    // A request's body length comes from Content-Length or chunked Transfer-Encoding; without either HTTP/1.1 gives
    // it no body (RFC 9112, section 6.3), but cpp-httplib 0.11 reads a POST's body until the client closes: a client
    // waiting for its answer held an HTTP thread for the whole read timeout (10 s), so a few such requests stalled
    // every other client. They are answered 411 before any body is read.
    http.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (req.method != "POST" || req.has_header("Content-Length") || chunked(req))
        return httplib::Server::HandlerResponse::Unhandled;
      error(res, 411, "a POST needs a Content-Length header (or Transfer-Encoding: chunked); this one has neither");
      return httplib::Server::HandlerResponse::Handled;
    });
    // What the library answers itself (no route: 404; a body over the limit: 413; a bad request line: 400) gets
    // the JSON error too.
    http.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      std::string what;
      switch (res.status) {
        case 404:
          what = "no such path: " + req.method + " " + req.path + " (see /v2/models/" + model.name + ")";
          break;
        case 413:
          what = "the request body is larger than --max-body-bytes " + std::to_string(options.max_body_bytes);
          break;
        default:
          what = "HTTP " + std::to_string(res.status);
      }
      answer(res, res.status, {{"error", what}});
      if (res.status == 413 || res.status == 400) metrics.request(res.status, error_kind(res.status));
    });
    http.set_exception_handler([this](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "the server failed";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what += std::string(": ") + e.what();
      } catch (...) {
      }
      error(res, 500, what);
    });
  }

  ServerOptions options;
  ModelShape model;
  std::function<std::vector<EnergyReading>()> energy;
  Metrics metrics;
  Batcher batcher;
  Classifier& classifier;
  httplib::Server http;
  std::atomic<bool> stopping{false};
};

Server::Server(ServerOptions options, ModelShape model, Classifier& classifier,
               std::function<std::vector<EnergyReading>()> energy)
    : impl_(std::make_unique<Impl>(run_on_serving_thread(std::move(options)), std::move(model), classifier,
                                   std::move(energy))) {
  Impl& s = *impl_;
  const int threads = s.options.http_threads;
  s.http.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
  // SO_REUSEADDR alone: a restarted server binds past the old one's TIME_WAIT connections, but a port another process
  // listens on is refused. The library's default adds SO_REUSEPORT, with which a second server silently shared the port
  // (and half of its connections).
  s.http.set_socket_options([](socket_t sock) {
    int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
  });
  // No Nagle: an answer goes out in a few writes (headers, body), and the second one held back for the first's ACK
  // waited out the client's delayed ACK, 40 ms a request (measured with `joule bench serve`).
  s.http.set_tcp_nodelay(true);
  s.http.set_payload_max_length(static_cast<size_t>(s.options.max_body_bytes));
  s.http.set_keep_alive_timeout(2);
  s.http.set_read_timeout(10);
  s.http.set_write_timeout(10);
  s.routes();
}

Server::~Server() = default;

int Server::bind() {
  Impl& s = *impl_;
  errno = 0;
  const int port = s.options.port == 0 ? s.http.bind_to_any_port(s.options.host)
                                       : (s.http.bind_to_port(s.options.host, s.options.port) ? s.options.port : -1);
  if (port <= 0) {
    const std::string cause = errno ? std::strerror(errno) : "the address does not resolve";
    throw joule::IoError("cannot listen on " + s.options.host + ":" + std::to_string(s.options.port) + ": " + cause,
                         errno == EADDRINUSE ? "another process holds that port: stop it or give --port another one"
                                             : "give --host an address of this machine (127.0.0.1, 0.0.0.0) and "
                                               "--port a free port");
  }
  deepen_backlog(port);
  return port;
}

void Server::serve() {
  // The batches run on this thread, the one that loaded the model, and HTTP on another. LibTorch's OpenMP regions run
  // on a second thread kept a second OpenMP pool beside the loading thread's; with more of libgomp's threads than
  // cores it throttles their spinning, and a bert-base forward (128 tokens, 2 cores, bf16) took 41-63 ms against
  // 27 ms on the loading thread (measured).
  std::thread http([this] {
    impl_->http.listen_after_bind();  // returns after stop(), once every connection's handler has answered
    impl_->batcher.drain();
  });
  impl_->batcher.work();
  http.join();
}

int64_t Server::queued() const { return impl_->batcher.queued(); }

void Server::stop() {
  impl_->stopping = true;
  impl_->http.stop();
}

}  // namespace joule::serve
