// `joule infer`: a JSONL file of texts (or LayoutLM words and boxes) in, one classification per line out.

#include <cstdio>
#include <iostream>
#include <string>

#include "launch/util/progress.h"
#include "models/infer/infer.h"
#include "tools/cli/classifier_flags.h"
#include "tools/cli/command.h"
#include "tools/cli/engine.h"
#include "tools/cli/flags.h"

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

// The number flags, for the declaration and the reading alike.
const NumberFlag kMaxLength{"max-length",
                            "tokens per input (a line, an example) at most: longer ones are truncated",
                            "0",
                            {0, 65536},
                            "0: the model's positions, at most 512"};
const NumberFlag kForwardThreads{"threads", "intra-op threads", "0", kThreads, "0: every core"};

}  // namespace

void add_classifier_flags(cxxopts::Options& o) {
  o.add_options()("architecture", "HuggingFace class to run (default: config.json's)", cxxopts::value<std::string>())(
      "precision", "auto, fp32 or bf16 (auto: bf16 where the CPU has bf16 matmul instructions)",
      cxxopts::value<std::string>()->default_value("auto"))(
      "allow-untrained-head", "run a classifier whose head or pooler the directory lacks (initialized at random)")(
      "cased", "keep case (default: tokenizer_config.json's do_lower_case, else lower-case)");
  add_number_flags(o, {kMaxLength, kForwardThreads});
}

models::infer::ClassifierOptions classifier_options(const cxxopts::ParseResult& r, const std::string& model_dir) {
  models::infer::ClassifierOptions co;
  co.model_dir = model_dir;
  if (r.count("architecture")) co.architecture = r["architecture"].as<std::string>();
  co.precision = choice_flag<models::PrecisionSetting>(r, "precision", models::kPrecisionWords);
  co.max_length = int_flag(r, kMaxLength);
  co.threads = thread_flag(r, kForwardThreads);
  if (r.count("cased")) co.lower_case = false;
  co.allow_initialized = r.count("allow-untrained-head") > 0;
  return co;
}

int infer(int argc, char** argv) {
  cxxopts::Options o(
      "joule infer",
      "classify the lines of a JSONL file with a BERT/LayoutLM classifier directory (models/infer/infer.h "
      "describes the lines)");
  add_path_flags(
      o,
      {{"model", "HuggingFace classifier directory (config.json, model.safetensors, vocab.txt)", PathKind::input_dir},
       {"input", "JSONL: {\"text\": ...} or {\"words\": ..., \"boxes\": ...}", PathKind::input_file, "jsonl"},
       {"output", "JSONL written atomically, one line per input line", PathKind::output_file}});
  o.add_options()("skip-bad-lines", "report and skip lines that cannot be read (default: refuse the file)");
  const NumberFlag batch{"batch", "lines per forward pass", "8", kBatch};
  add_number_flags(o, {batch});
  add_classifier_flags(o);
  add_quiet_flag(o);
  auto r = parse(o, argc, argv);
  models::infer::InferOptions io;
  static_cast<models::infer::ClassifierOptions&>(io) = classifier_options(r, required(r, "model"));
  io.input = required(r, "input");
  io.output = required(r, "output");
  io.batch = int_flag(r, batch);
  io.skip_bad_lines = r.count("skip-bad-lines") > 0;
  io.on_skip = [](const std::string& line) { std::cerr << line << "\n" << std::flush; };
  Progress progress("infer", Progress::Unit::lines, 0, r.count("quiet") > 0);
  io.on_progress = [&](int64_t done, int64_t of) { progress.set(done, of); };
  const auto s = models::infer::run_inference(io);
  progress.finish();
  std::cout << s.loading_notes << s.precision_reason << "\n" << inference_line(s, io.output) << std::flush;
  return 0;
}

}  // namespace joule::cli
