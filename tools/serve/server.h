// `joule serve`'s HTTP side: the Open Inference Protocol v2 routes (oip.h) over cpp-httplib, each inference request
// through the dynamic batcher (batcher.h), and /metrics (metrics.h). Errors are JSON {"error": "..."} with the status
// that names their kind: 400 a request the protocol or the model's input rules refuse, 404 an unknown model or path,
// 413 a body over --max-body-bytes, 503 a full queue (with Retry-After) or a server shutting down, 500 a batch that
// failed. No LibTorch in its interface: the model is a Classifier.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tools/serve/batcher.h"
#include "tools/serve/metrics.h"
#include "tools/serve/oip.h"

namespace joule::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (bind() says which)
  BatcherOptions batcher;
  int64_t max_body_bytes = 1 << 20;
  int http_threads = 64;  // connections served at once; more wait for a thread
  std::string version;    // joule's, for GET /v2
};

class Server {
 public:
  // `classifier` runs the batches; `energy` (may be empty) reads the meters' joules for /metrics at each scrape.
  Server(ServerOptions options, ModelShape model, Classifier& classifier,
         std::function<std::vector<EnergyReading>()> energy);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds the address; joule::IoError naming it and the cause (a port in use, an address this host lacks). Returns
  // the port (the one picked for port 0).
  int bind();
  // Serves until stop(), then answers every request it took (the queue drains) and returns.
  void serve();
  // Stops accepting connections (any thread, e.g. the one that waits for SIGTERM).
  void stop();
  // Examples waiting in the batcher's queue now.
  int64_t queued() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace joule::serve
