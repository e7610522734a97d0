// `joule serve`: a classifier directory behind the Open Inference Protocol v2 over HTTP (tools/serve/), until SIGTERM
// or SIGINT, which stop accepting, answer what was taken and exit 0. Its command line is read in engine_args.cc.

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <iostream>
#include <string>
#include <thread>

#include "models/infer/classifier.h"
#include "tools/cli/engine.h"
#include "tools/cli/engine_args.h"
#include "tools/model_commands.h"
#include "tools/serve/server.h"
#include "trainer/cost/energy.h"

namespace joule::cli {
namespace {

// SIGTERM and SIGINT, whichever thread the kernel hands them to, become a byte on this pipe (all a handler may safely
// do); the thread that waits on it stops the server. They replace the handlers that remove temporaries and die
// (serve writes no file).
int stop_pipe[2] = {-1, -1};

extern "C" void on_stop_signal(int signal) {
  const char byte = static_cast<char>(signal);
  (void)!write(stop_pipe[1], &byte, 1);
}

void catch_stop_signals() {
  if (pipe(stop_pipe) != 0) throw joule::IoError("cannot make a pipe for SIGTERM", "check the process's open files");
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;
  for (int signal : {SIGTERM, SIGINT}) sigaction(signal, &action, nullptr);
}

// The signal that arrived (0: none within `timeout_ms`).
int wait_stop_signal(int timeout_ms) {
  pollfd p{stop_pipe[0], POLLIN, 0};
  char byte = 0;
  if (poll(&p, 1, timeout_ms) > 0 && read(stop_pipe[0], &byte, 1) == 1) return byte;
  return 0;
}

// The energy meters' joules since the start, by component and source, for /metrics.
std::vector<serve::EnergyReading> readings(cost::EnergyMonitor& monitor) {
  const cost::EnergyTotals totals = monitor.totals();
  std::vector<serve::EnergyReading> out;
  for (int c = 0; c < cost::kComponents; ++c)
    for (int s = 0; s < cost::kSources; ++s) {
      const double j = totals.at(static_cast<cost::Component>(c), static_cast<cost::Source>(s));
      if (j > 0)
        out.push_back({cost::component_name(static_cast<cost::Component>(c)),
                       cost::source_name(static_cast<cost::Source>(s)), j});
    }
  return out;
}

}  // namespace

int serve(int argc, char** argv) {
  ServeArgs a = read_serve(argc, argv);
  catch_stop_signals();
  const models::infer::ClassifierOptions& co = a.classifier;
  serve::ServerOptions& so = a.server;
  so.version = JOULE_VERSION;
  const std::string& name = a.name;

  cost::MeterContext meters;
  meters.apply_environment();
  meters.profile = cost::load_instance_profile(a.instance, tools::config_dir() + "/hardware");
  models::infer::Classifier classifier(co);
  std::cout << classifier.loading_notes() << classifier.precision_reason() << "\n" << std::flush;
  cost::EnergyMonitor energy("auto", meters, 1.0);
  serve::ModelShape shape{name, classifier.architecture(), classifier.layout(), classifier.token_head(),
                          so.batcher.max_batch};
  serve::Server server(so, shape, classifier, [&energy] { return readings(energy); });
  const int bound = server.bind();
  std::printf(
      "serving %s (%s) on http://%s:%d: batches of up to %lld examples, %lld ms queue delay, %lld examples "
      "queued at most; energy: %s\n",
      name.c_str(), classifier.architecture().c_str(), so.host.c_str(), bound,
      static_cast<long long>(so.batcher.max_batch), static_cast<long long>(a.delay_ms),
      static_cast<long long>(so.batcher.max_queue), energy.sources().c_str());
  std::fflush(stdout);
  if (a.check) return 0;

  std::atomic<bool> done{false};
  std::thread waiter([&] {
    while (!done) {
      const int signal = wait_stop_signal(200);
      if (signal == SIGTERM || signal == SIGINT) {
        std::printf("%s: stopping: no new connections; answering the %lld examples queued\n",
                    signal == SIGTERM ? "SIGTERM" : "SIGINT", static_cast<long long>(server.queued()));
        std::fflush(stdout);
        server.stop();
        return;
      }
    }
  });
  server.serve();
  done = true;
  waiter.join();
  std::printf("stopped: every request taken was answered\n");
  std::fflush(stdout);
  return 0;
}

}  // namespace joule::cli
