// `joule infer`: a JSONL file of texts (or LayoutLM words and boxes) in, one classification per line out. Its command
// line is read in engine_args.cc.

#include <cstdio>
#include <iostream>
#include <string>

#include "launch/util/progress.h"
#include "models/infer/infer.h"
#include "tools/cli/engine.h"
#include "tools/cli/engine_args.h"

namespace joule::cli {
namespace {

// "40 lines -> out.jsonl: 38 inferred, 2 skipped, ...": what the run did, in one line.
std::string inference_line(const models::infer::InferSummary& s, const std::string& output) {
  char line[400];
  std::snprintf(line, sizeof line,
                "%lld lines -> %s: %lld inferred, %lld skipped, %lld truncated; %lld batches, %.1f %% padding; "
                "forward %.2f s (%.1f lines/s)\n",
                static_cast<long long>(s.lines), output.c_str(), static_cast<long long>(s.inferred),
                static_cast<long long>(s.skipped), static_cast<long long>(s.truncated),
                static_cast<long long>(s.batches),
                s.padded_tokens > 0 ? 100.0 * static_cast<double>(s.padded_tokens - s.tokens) / s.padded_tokens : 0.0,
                s.seconds, s.seconds > 0 ? static_cast<double>(s.inferred) / s.seconds : 0.0);
  return line;
}

}  // namespace

int infer(int argc, char** argv) {
  InferArgs a = read_infer(argc, argv);
  models::infer::InferOptions& io = a.options;
  io.on_skip = [](const std::string& line) { std::cerr << line << "\n" << std::flush; };
  Progress progress("infer", Progress::Unit::lines, 0, a.quiet);
  io.on_progress = [&](int64_t done, int64_t of) { progress.set(done, of); };
  const auto s = models::infer::run_inference(io);
  progress.finish();
  std::cout << s.loading_notes << s.precision_reason << "\n" << inference_line(s, io.output) << std::flush;
  return 0;
}

}  // namespace joule::cli
