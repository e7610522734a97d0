// `joule bench serve`: the rate `joule serve` sustains within a p99 bound, measured as its clients see it: one-example
// requests at Poisson arrivals (tools/serve/load.h), one offered rate after another, against a server it starts
// (`joule serve --model DIR --port 0`, with the flags after `--`) or one already running (--url).
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <memory>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/tokenizer.h"
#include "launch/util/error.h"
#include "launch/util/format.h"
#include "models/bert_config.h"
#include "models/flops.h"
#include "tools/bench_infer.h"
#include "tools/cli/command.h"
#include "tools/cli/flags.h"
#include "tools/config_dir.h"
#include "tools/serve/load.h"
#include "trainer/cost/accounting.h"
#include "trainer/cost/hardware.h"

namespace joule::cli {
namespace {

using serve::Endpoint;

// `joule serve` as a child process: started on a free port, its address read from its start line, stopped with
// SIGTERM (and killed with this process: PR_SET_PDEATHSIG). Its stderr is kept in an unlinked file: a server that
// cannot start becomes this command's error (one error, the server's words and exit code); its notes are said at the
// end.
class ServerProcess {
 public:
  ServerProcess(const std::string& model_dir, const std::vector<std::string>& extra) {
    int out[2];
    if (pipe(out) != 0) throw joule::IoError(std::string("cannot make a pipe: ") + std::strerror(errno));
    err_ = std::tmpfile();
    if (!err_) throw joule::IoError(std::string("cannot make a temporary file: ") + std::strerror(errno));
    std::vector<std::string> args = {"joule", "serve", "--model", model_dir, "--port", "0"};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = fork();
    if (pid_ < 0) throw joule::IoError(std::string("cannot start joule serve: ") + std::strerror(errno));
    if (pid_ == 0) {
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      dup2(out[1], STDOUT_FILENO);
      dup2(fileno(err_), STDERR_FILENO);
      close(out[0]);
      close(out[1]);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv("/proc/self/exe", argv.data());
      _exit(127);
    }
    close(out[1]);
    out_ = fdopen(out[0], "r");
    char buffer[4096];
    while (std::fgets(buffer, sizeof buffer, out_)) {
      const std::string line = buffer;
      std::smatch m;
      if (std::regex_search(line, m, std::regex(R"(^serving \S+ \(\S+\) on http://(\S+):([0-9]+): )"))) {
        server_.host = m[1].str();
        server_.port = std::stoi(m[2].str());
        return;
      }
    }
    const int status = stop();
    const std::string said = stderr_text();
    const size_t error = said.find("joule serve: error: "), hint = said.find("\nwhat to do: ");
    if (error == std::string::npos)
      throw joule::Error("joule serve --model " + model_dir + " exited (" + status_words(status) + ") before serving" +
                             (said.empty() ? "" : ":\n" + said),
                         "the flags after `--` are joule serve's");
    const size_t start = error + std::strlen("joule serve: error: ");
    const std::string message =
        "joule serve: " + said.substr(start, hint == std::string::npos ? std::string::npos : hint - start);
    const std::string what_to_do =
        hint == std::string::npos ? "" : said.substr(hint + 13, said.find('\n', hint + 1) - hint - 13);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 2) throw UsageError(message, what_to_do);
    throw joule::Error(message, what_to_do);
  }
  ~ServerProcess() {
    stop();
    if (err_) std::fclose(err_);
  }
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  const Endpoint& endpoint() const { return server_; }

  // SIGTERM, then its exit status (waitpid's); -1 when already stopped.
  int stop() {
    if (pid_ <= 0) return -1;
    kill(pid_, SIGTERM);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    if (out_) std::fclose(out_);
    out_ = nullptr;
    return status;
  }

  // What the server wrote on stderr so far.
  std::string stderr_text() const {
    std::string text;
    std::rewind(err_);
    char buffer[4096];
    for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, err_)) > 0;) text.append(buffer, n);
    return text;
  }

  static std::string status_words(int status) {
    if (WIFEXITED(status)) return "exit status " + std::to_string(WEXITSTATUS(status));
    if (WIFSIGNALED(status)) return std::string("signal ") + strsignal(WTERMSIG(status));
    return "status " + std::to_string(status);
  }

 private:
  pid_t pid_ = -1;
  FILE* out_ = nullptr;
  FILE* err_ = nullptr;
  Endpoint server_;
};

// Request bodies of one text each, `tokens` long with [CLS] and [SEP]: whole words of the model's vocabulary (each
// one token), drawn at random; a few different ones so no cache answers them.
std::vector<std::string> request_bodies(const std::string& model_dir, int64_t tokens, uint64_t seed) {
  const std::string file = model_dir + "/vocab.txt";
  const data::Vocab vocab = data::Vocab::load(file);
  std::vector<std::string> words;
  for (int32_t id = 0; id < vocab.size(); ++id) {
    const std::string& t = vocab.token(id);
    if (t.size() >= 2 && std::all_of(t.begin(), t.end(), [](char c) { return c >= 'a' && c <= 'z'; }))
      words.push_back(t);
  }
  if (words.size() < 10)
    throw joule::Error(file + " has " + std::to_string(words.size()) + " lower-case whole words; the requests need 10",
                       "bench serve writes its requests from the model's vocabulary");
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<size_t> pick(0, words.size() - 1);
  std::vector<std::string> bodies;
  for (int k = 0; k < 16; ++k) {
    std::string text;
    for (int64_t w = 0; w < tokens - 2; ++w) text += (w ? " " : "") + words[pick(rng)];
    bodies.push_back(
        nlohmann::json{{"inputs", {{{"name", "text"}, {"shape", {1}}, {"datatype", "BYTES"}, {"data", {text}}}}}}
            .dump());
  }
  return bodies;
}

// One offered rate: the load and what the server's /metrics counted meanwhile.
struct ServedPoint {
  serve::LoadResult load;
  double mean_batch = 0, joules = 0, inferences = 0;
};

ServedPoint measure(serve::LoadOptions load, double rate) {
  load.rate = rate;
  const auto before = serve::scrape_metrics(load.server);
  ServedPoint p;
  p.load = serve::run_load(load);
  const auto after = serve::scrape_metrics(load.server);
  const auto delta = [&](const std::string& name) {
    return serve::metric_sum(after, name) - serve::metric_sum(before, name);
  };
  const double batches = delta("joule_batch_examples_count");
  p.mean_batch = batches > 0 ? delta("joule_batch_examples_sum") / batches : 0;
  p.joules = delta("joule_energy_joules_total");
  p.inferences = delta("joule_inferences_total");
  return p;
}

// Whether the server kept up with the point's arrivals: every one answered within the bound, at their rate.
bool meets(const ServedPoint& p, double p99_ms, double seconds) {
  return p.load.error_count() == 0 && p.load.answered > 0 && (p99_ms <= 0 || p.load.p99_ms <= p99_ms) &&
         p.load.achieved_per_s >= 0.9 * static_cast<double>(p.load.sent) / seconds;
}

// The given rates in turn; without any, from `start` doubled while the bound is met, then halved back 3 times between
// the last rate that met it and the first that did not. Sorted by offered rate.
std::vector<ServedPoint> sweep(const serve::LoadOptions& load, const std::vector<double>& rates, double start,
                               double bound) {
  std::vector<ServedPoint> points;
  if (!rates.empty()) {
    for (double rate : rates) points.push_back(measure(load, rate));
    return points;
  }
  double good = 0, bad = 0;
  for (double rate = start; rate <= 1e6; rate *= 2) {
    points.push_back(measure(load, rate));
    if (!meets(points.back(), bound, load.seconds)) {
      bad = rate;
      break;
    }
    good = rate;
  }
  for (int k = 0; k < 3 && bad > 0; ++k) {
    const double rate = good > 0 ? (good + bad) / 2 : bad / 2;
    points.push_back(measure(load, rate));
    (meets(points.back(), bound, load.seconds) ? good : bad) = rate;
  }
  std::sort(points.begin(), points.end(),
            [](const ServedPoint& a, const ServedPoint& b) { return a.load.offered_per_s < b.load.offered_per_s; });
  return points;
}

}  // namespace

int bench_serve(int argc, char** argv) {
  // What follows `--` is joule serve's (the server this starts).
  std::vector<std::string> serve_args;
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--") {
      for (int k = i + 1; k < argc; ++k) serve_args.push_back(argv[k]);
      argc = i;
      break;
    }
  cxxopts::Options o("joule bench serve",
                     "the rate joule serve sustains within a p99 bound: one-example requests at Poisson arrivals, "
                     "rate after rate; flags after `--` go to the joule serve it starts");
  add_path_flags(
      o, {{"model", "the classifier directory served (its vocabulary writes the requests; its config sizes the plan)",
           PathKind::input_dir},
          {"out",
           "also write the result as an inference run, DIR/inference.json (`joule summary DIR`, `joule report DIR`, "
           "`joule plan --inference --measured DIR`)",
           PathKind::output_dir}});
  o.add_options()("url", "a joule serve already running there, http://HOST:PORT (default: start one)",
                  cxxopts::value<std::string>())(
      "rates",
      "offered requests/s, comma-separated (default: from --start-rate, doubled while p99 meets the bound, "
      "then halved back 3 times between the last that met it and the first that did not)",
      cxxopts::value<std::string>()->default_value(""))("json", "one JSON line instead of the table")(
      "instance", "instance profile for the price (configs/hardware)",
      cxxopts::value<std::string>()->default_value("cpu-host"))("region", "grid region for CO2",
                                                                cxxopts::value<std::string>()->default_value("world"))(
      "replace", "replace an --out that holds an inference run");
  const NumberFlag seq_len{"seq-len", "tokens a request's text has", "128", kSeqLen};
  const NumberFlag seconds{"seconds", "arrivals per rate over this long", "10", {0.1, 3600}};
  const NumberFlag p99{"p99-ms", "latency bound: the highest rate whose p99 meets it", "100", {0, 1e6}, "0: none"};
  const NumberFlag connections{"connections", "client connections (one request in flight on each)", "64", {1, 4096}};
  const NumberFlag start_rate{"start-rate", "the first rate of the search (no --rates)", "4", {0.01, 1e6}};
  add_number_flags(o, {seq_len, seconds, p99, connections, start_rate});
  auto r = parse(o, argc, argv);
  check_replacing(r, "out", "an inference run (inference.json)");
  const std::string model_dir = required(r, "model");
  // The requests' length within what the model takes (a server truncates longer texts: the figures would be for
  // another length than the one they say).
  const models::BertConfig config = models::BertConfig::from_json_file(model_dir + "/config.json");
  const int64_t max_tokens = std::min<int64_t>(config.max_position_embeddings, 512);
  if (int_flag(r, seq_len) > max_tokens)
    throw UsageError("--seq-len " + std::to_string(int_flag(r, seq_len)) + " is longer than " + model_dir + " takes (" +
                     std::to_string(max_tokens) + " tokens)");
  if (r.count("url") && !serve_args.empty())
    throw UsageError("flags after `--` go to the joule serve that bench serve starts; with --url it starts none",
                     "give them to the server at --url when you start it");
  std::vector<double> rates;
  for (const std::string& item : split_commas(r["rates"].as<std::string>()))
    rates.push_back(checked_number(item, "--rates item", OptionRange{0.01, 1e6}));

  std::unique_ptr<ServerProcess> started;
  Endpoint server;
  if (r.count("url")) {
    server = serve::parse_url(r["url"].as<std::string>());
  } else {
    started = std::make_unique<ServerProcess>(model_dir, serve_args);
    server = started->endpoint();
  }
  const auto metrics = serve::scrape_metrics(server);
  const auto info = serve::metric_labels(metrics, "joule_model_info");
  if (!info.count("model") || !info.count("precision") || !info.count("max_batch"))
    throw joule::Error("http://" + server.host + ":" + std::to_string(server.port) +
                           "/metrics has no joule_model_info: not a joule serve of this version",
                       "bench serve reads what is served (model, precision, batching) there");

  serve::LoadOptions load;
  load.server = server;
  load.path = "/v2/models/" + info.at("model") + "/infer";
  load.bodies = request_bodies(model_dir, int_flag(r, seq_len), 1);
  load.seconds = number_flag(r, seconds);
  load.connections = static_cast<int>(int_flag(r, connections));
  const double bound = number_flag(r, p99);

  // Warm-up: the model's first passes (and allocations) out of the figures.
  serve::LoadOptions warmup = load;
  warmup.seconds = 1;
  measure(warmup, 16);

  const std::vector<ServedPoint> points = sweep(load, rates, number_flag(r, start_rate), bound);

  tools::InferBenchResult result;
  result.load = "served";
  result.model = model_dir;
  result.architecture = info.count("architecture") ? info.at("architecture") : "";
  result.precision = info.at("precision");
  result.precision_reason = result.precision + ", as the server reports (joule_model_info)";
  result.threads = info.count("threads") ? std::stoi(info.at("threads")) : 0;
  result.seq_len = int_flag(r, seq_len);
  result.p99_bound_ms = bound;
  result.date = cost::utc_now_iso();
  result.price(cost::load_instance_profile(r["instance"].as<std::string>(), tools::config_dir() + "/hardware"),
               r["region"].as<std::string>());
  std::string sources;  // "cpu: model, memory: model"
  for (const auto& [series, value] : metrics)
    if (series.rfind("joule_energy_joules_total{", 0) == 0) {
      auto labels = serve::series_labels(series);
      sources += (sources.empty() ? "" : ", ") + labels["component"] + ": " + labels["source"];
    }
  result.energy_sources = sources.empty() ? "none read" : sources;
  const double gflop = models::total_flops(models::inference_gemms(config, 1, result.seq_len, 0, false, true)) / 1e9;
  for (const ServedPoint& s : points) {
    tools::InferPoint p;
    p.batch = std::stoll(info.at("max_batch"));
    p.calls = s.load.answered;
    p.inferences_per_s = std::max(s.load.achieved_per_s, 1e-9);
    p.p50_ms = s.load.p50_ms;
    p.p90_ms = s.load.p90_ms;
    p.p99_ms = s.load.p99_ms;
    p.offered_per_s = s.load.offered_per_s;
    p.errors = s.load.error_count();
    p.mean_batch = std::min(s.mean_batch, static_cast<double>(p.batch));
    p.joules_per_million = s.inferences > 0 ? s.joules / s.inferences * 1e6 : 0;
    p.usd_per_million = result.usd_per_million(p.inferences_per_s);
    p.gflops = gflop * p.inferences_per_s;
    result.points.push_back(p);
    for (const auto& [kind, n] : s.load.errors)
      std::cerr << "note: at " << format_number("%g", s.load.offered_per_s) << " requests/s, " << n << " " << kind
                << "\n";
    if (s.load.late > s.load.sent / 100)
      std::cerr << "note: at " << format_number("%g", s.load.offered_per_s) << " requests/s, " << s.load.late
                << " requests left over 10 ms late, every connection busy (the p99 counts that wait): the server "
                   "fell behind, or more --connections are needed\n";
  }
  result.choose();
  if (started) {
    const int status = started->stop();
    std::cerr << started->stderr_text();
    if (status != 0)
      std::cerr << "warning: joule serve ended with " << ServerProcess::status_words(status) << " on SIGTERM\n";
  }
  std::cout << (r.count("json") ? result.to_json() + "\n" : result.to_text()) << std::flush;
  if (r.count("out")) {
    const std::string file = tools::write_inference_run(result, r["out"].as<std::string>());
    if (!r.count("json")) std::cout << "wrote " << file << "\n";
  }
  return 0;
}

}  // namespace joule::cli
