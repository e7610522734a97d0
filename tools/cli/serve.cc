// `joule serve`: a classifier directory behind the Open Inference Protocol v2 over HTTP (tools/serve/), until SIGTERM
// or SIGINT, which stop accepting, answer what was taken and exit 0.

#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <regex>
#include <string>
#include <thread>

#include "models/infer/classifier.h"
#include "tools/cli/classifier_flags.h"
#include "tools/cli/command.h"
#include "tools/cli/engine.h"
#include "tools/cli/flags.h"
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

// The model's name in the URLs: --name, else the directory's.
std::string model_name(const cxxopts::ParseResult& r, const std::string& dir) {
  std::string name =
      r.count("name") ? r["name"].as<std::string>() : std::filesystem::path(output_directory(dir)).filename().string();
  if (!std::regex_match(name, std::regex("[A-Za-z0-9_.-]{1,128}")) || name == "." || name == "..")
    throw UsageError("--name '" + name + "' cannot be a model's name in a URL",
                     "give --name 1 to 128 letters, digits, '_', '-' or '.'");
  return name;
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
  cxxopts::Options o("joule serve",
                     "serve a BERT/LayoutLM classifier directory over HTTP with the Open Inference Protocol v2 "
                     "(KServe, Triton): POST /v2/models/NAME/infer, /v2/health/ready, /metrics");
  add_path_flags(o, {{"model", "HuggingFace classifier directory (config.json, model.safetensors, vocab.txt)",
                      PathKind::input_dir}});
  add_classifier_flags(o);
  o.add_options()("name", "the model's name in the URLs (default: the directory's)", cxxopts::value<std::string>())(
      "host", "address to listen on", cxxopts::value<std::string>()->default_value("127.0.0.1"))(
      "instance", "instance profile for the energy model (configs/hardware)",
      cxxopts::value<std::string>()->default_value("cpu-host"))(
      "check", "load the model and bind the address, then exit 0 without serving (a deployment's pre-flight)");
  const NumberFlag port{"port", "TCP port", "8000", {0, 65535}, "0: any free port (the start line says which)"};
  const NumberFlag max_batch{"max-batch", "examples a batch holds at most (and a request)", "8", {1, 1024}};
  const NumberFlag delay{"max-queue-delay-ms",
                         "how long a request waits for others to batch with",
                         "0",
                         {0, 10000},
                         "0: a batch takes what waits when the last one ends"};
  const NumberFlag max_queue{"max-queue", "examples waiting at most; more get 503", "256", {1, 1 << 20}};
  const NumberFlag max_body{"max-body-bytes", "request body size at most; larger get 413", "1048576", {1024, 1 << 30}};
  const NumberFlag http_threads{"http-threads", "connections served at once (others wait)", "64", {1, 4096}};
  add_number_flags(o, {port, max_batch, delay, max_queue, max_body, http_threads});
  auto r = parse(o, argc, argv);
  catch_stop_signals();

  const models::infer::ClassifierOptions co = classifier_options(r, required(r, "model"));
  serve::ServerOptions so;
  so.host = r["host"].as<std::string>();
  so.port = static_cast<int>(int_flag(r, port));
  so.batcher.max_batch = int_flag(r, max_batch);
  const int64_t delay_ms = int_flag(r, delay);
  so.batcher.max_delay_s = static_cast<double>(delay_ms) / 1e3;
  so.batcher.max_queue = int_flag(r, max_queue);
  if (so.batcher.max_queue < so.batcher.max_batch)
    throw UsageError("--max-queue " + std::to_string(so.batcher.max_queue) + " is below --max-batch " +
                     std::to_string(so.batcher.max_batch) + ": no full batch could ever wait");
  so.max_body_bytes = int_flag(r, max_body);
  so.http_threads = static_cast<int>(int_flag(r, http_threads));
  so.version = JOULE_VERSION;
  const std::string name = model_name(r, co.model_dir);

  cost::MeterContext meters;
  meters.apply_environment();
  meters.profile = cost::load_instance_profile(r["instance"].as<std::string>(), tools::config_dir() + "/hardware");
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
      static_cast<long long>(so.batcher.max_batch), static_cast<long long>(delay_ms),
      static_cast<long long>(so.batcher.max_queue), energy.sources().c_str());
  std::fflush(stdout);
  if (r.count("check")) return 0;

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
