// joule: the command-line glue. Parse arguments, build the objects, run; all logic lives in libraries.
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "collectives/communicator.h"
#include "data/create.h"
#include "data/dataset.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "data/vocab_builder.h"
#include "launch/cpu_allocator.h"
#include "launch/cpu_isa.h"
#include "launch/runtime.h"
#include "models/bert_config.h"
#include "models/infer/infer.h"
#include "models/precision.h"
#include "models/safetensors.h"
#include "tools/bench_comm.h"
#include "tools/bench_infer.h"
#include "tools/bench_model.h"
#include "tools/bench_train.h"
#include "tools/cli_flags.h"
#include "tools/data_commands.h"
#include "tools/model_commands.h"
#include "tools/plan.h"
#include "tools/plan_inference.h"
#include "tools/report.h"
#include "trainer/checkpoint.h"
#include "trainer/cost/hardware.h"
#include "trainer/fault.h"
#include "trainer/sim/validation.h"
#include "trainer/trainer.h"

namespace {

const char* kUsage =
    "joule: data-parallel BERT-Large pretraining that reports speed, energy and cost\n"
    "\n"
    "usage: joule <command> [options]   (joule <command> --help for its options)\n"
    "\n"
    "commands:\n"
    "  train          pretrain BERT (run under mpirun/srun): --config RUN.toml [--set key=value ...]\n"
    "  eval           masked-LM and NSP accuracy of a model directory on shards (JSON)\n"
    "  export         a checkpoint (or a run's newest) as a HuggingFace model directory\n"
    "  summary        a run's training-cost summary again (table; rewrites emissions.csv)\n"
    "  report         a run's self-contained HTML report with SVG charts\n"
    "  plan           hours, seq/hour, kWh, USD, CO2 on N x trn1/p4d/p5 (cluster performance model); with\n"
    "                 --inference: instances, USD/kWh/CO2 per million inferences for a rate on inf1/inf2/g4dn/g5/c*\n"
    "  version        joule's version and the LibTorch, MPI, HDF5 and BLAS in use\n"
    "  model init     write a freshly initialized HuggingFace model directory\n"
    "  model info     parameter counts of a model config or directory\n"
    "  model forward  a BERT/LayoutLM model directory's logits for inputs in a safetensors file\n"
    "  infer          classify the lines of a JSONL file with a BERT/LayoutLM classifier directory\n"
    "  bench model    forward+backward throughput against this CPU's sgemm rate\n"
    "  bench infer    inference throughput and p50/p99 latency per batch size, energy and cost per million\n"
    "  bench comm     all-reduce busbw table and the bucketed reducer vs one all-reduce (under mpirun)\n"
    "  bench data     sequences/s the loader delivers to one rank under the global shuffle\n"
    "  bench train    the whole training step at N ranks: seq/s, roofline fraction, peak RSS (under mpirun)\n"
    "  data synth     write the deterministic synthetic demo corpus\n"
    "  data vocab     build a WordPiece vocabulary from a corpus\n"
    "  data create    raw text + vocab.txt -> pretraining shards (NVIDIA HDF5 layout)\n"
    "  data inspect   counts, length histogram, masking rate and decoded samples of shards\n"
    "  data tokenize  WordPiece tokens of each stdin line (to compare tokenizers)\n";

using joule::OptionRange;
using joule::UsageError;
using joule::tools::add_number_flags;
using joule::tools::int_flag;
using joule::tools::number_flag;
using joule::tools::NumberFlag;

// The ranges flags share. Bounds are what a run can mean, not what the hardware of the day holds: a batch of 2^20
// sequences, 4096 threads a process, 65536 nodes, a seed up to 10^18.
const OptionRange kSeeds{0, 1e18};
const OptionRange kThreads{0, 4096};
const OptionRange kNodes{1, 65536};
const OptionRange kBatch{1, 1 << 20};
const OptionRange kSeqLen{2, 65536};
const OptionRange kPredictions{0, 65536};
const OptionRange kRepeats{1, 1e9};
const OptionRange kWarmup{0, 1e9};

cxxopts::ParseResult parse(cxxopts::Options& options, int argc, char** argv) {
  options.add_options()("h,help", "show this help");
  cxxopts::ParseResult result = options.parse(argc, argv);
  if (result.count("help")) {
    std::cout << options.help() << std::flush;
    std::exit(0);
  }
  if (!result.unmatched().empty()) throw UsageError("unexpected argument '" + result.unmatched().front() + "'");
  return result;
}

std::string required(const cxxopts::ParseResult& r, const std::string& key) {
  if (!r.count(key)) throw UsageError("missing required option --" + key);
  const std::string value = r[key].as<std::string>();
  if (value.empty()) throw UsageError("--" + key + " is empty: it names a file or directory");
  return value;
}

int cmd_version(int argc, char** argv) {
  cxxopts::Options o("joule version", "joule's version and the libraries in use");
  parse(o, argc, argv);
  std::string warning;
  std::cout << joule::tools::version_report(&warning) << std::flush;
  if (!warning.empty()) std::cerr << warning;
  return 0;
}

int cmd_model_init(int argc, char** argv) {
  cxxopts::Options o("joule model init", "write a freshly initialized HuggingFace model directory");
  o.add_options()("config", "preset name, config.json or model directory", cxxopts::value<std::string>())(
      "out", "output directory", cxxopts::value<std::string>())("dtype", "F32, F16 or BF16",
                                                                cxxopts::value<std::string>()->default_value("F32"))(
      "architecture",
      "HuggingFace class (default BertForPreTraining; or BertForSequenceClassification, "
      "LayoutLMForTokenClassification, ...)",
      cxxopts::value<std::string>()->default_value(""));
  const NumberFlag seed{"seed", "initialization seed", "0", kSeeds};
  const NumberFlag labels{"labels", "a classifier's labels", "0", {0, 65536}, "0: the config's id2label, else 2"};
  add_number_flags(o, {seed, labels});
  auto r = parse(o, argc, argv);
  std::cout << joule::tools::model_init(required(r, "config"), static_cast<uint64_t>(int_flag(r, seed)),
                                        required(r, "out"), r["dtype"].as<std::string>(),
                                        r["architecture"].as<std::string>(), int_flag(r, labels))
            << "\n";
  return 0;
}

int cmd_model_info(int argc, char** argv) {
  cxxopts::Options o("joule model info", "parameter counts of a model config or directory");
  o.add_options()("config", "preset name, config.json or model directory", cxxopts::value<std::string>())(
      "dir", "model directory (also accepted positionally)", cxxopts::value<std::string>());
  o.parse_positional({"dir"});
  o.positional_help("[DIR]").show_positional_help();
  auto r = parse(o, argc, argv);
  if (r.count("config") == r.count("dir")) throw UsageError("give either a model directory or --config");
  std::cout << joule::tools::model_info(r.count("dir") ? r["dir"].as<std::string>() : r["config"].as<std::string>());
  return 0;
}

int cmd_model_forward(int argc, char** argv) {
  cxxopts::Options o("joule model forward",
                     "a BERT/LayoutLM model directory's logits (and hidden, pooled states) for the inputs of a "
                     "safetensors file");
  o.add_options()("dir", "HuggingFace model directory (config.json, model.safetensors)", cxxopts::value<std::string>())(
      "inputs", "safetensors: input_ids, attention_mask [, token_type_ids, bbox] (I64 or I32)",
      cxxopts::value<std::string>())("out", "safetensors written: logits, hidden, pooled (F32)",
                                     cxxopts::value<std::string>())(
      "architecture", "HuggingFace class to run (default: config.json's)", cxxopts::value<std::string>())(
      "precision", "auto, fp32 or bf16", cxxopts::value<std::string>()->default_value("fp32"));
  const NumberFlag labels{
      "labels", "labels of a classification head (default: config.json's id2label, else 2)", "0", {0, 65536}};
  add_number_flags(o, {labels});
  auto r = parse(o, argc, argv);
  std::cout << joule::tools::model_forward(
                   required(r, "dir"), r.count("architecture") ? r["architecture"].as<std::string>() : "",
                   int_flag(r, labels), required(r, "inputs"), required(r, "out"), r["precision"].as<std::string>())
            << std::flush;
  return 0;
}

int cmd_infer(int argc, char** argv) {
  cxxopts::Options o(
      "joule infer",
      "classify the lines of a JSONL file with a BERT/LayoutLM classifier directory (models/infer/infer.h "
      "describes the lines)");
  o.add_options()("model", "HuggingFace classifier directory (config.json, model.safetensors, vocab.txt)",
                  cxxopts::value<std::string>())("input", "JSONL: {\"text\": ...} or {\"words\": ..., \"boxes\": ...}",
                                                 cxxopts::value<std::string>())(
      "output", "JSONL written atomically, one line per input line", cxxopts::value<std::string>())(
      "architecture", "HuggingFace class to run (default: config.json's)", cxxopts::value<std::string>())(
      "precision", "auto, fp32 or bf16 (auto: bf16 where the CPU has bf16 matmul instructions)",
      cxxopts::value<std::string>()->default_value("auto"))(
      "skip-bad-lines", "report and skip lines that cannot be read (default: refuse the file)")(
      "allow-untrained-head", "run a classifier whose head or pooler the directory lacks (initialized at random)")(
      "cased", "keep case (default: tokenizer_config.json's do_lower_case, else lower-case)");
  const NumberFlag batch{"batch", "lines per forward pass", "8", kBatch};
  const NumberFlag max_length{"max-length",
                              "tokens per line at most (longer lines are truncated)",
                              "0",
                              {0, 65536},
                              "0: the model's positions, at most 512"};
  const NumberFlag threads{"threads", "intra-op threads", "0", kThreads, "0: every core"};
  add_number_flags(o, {batch, max_length, threads});
  auto r = parse(o, argc, argv);
  joule::models::infer::InferOptions io;
  io.model_dir = required(r, "model");
  io.input = required(r, "input");
  io.output = required(r, "output");
  if (r.count("architecture")) io.architecture = r["architecture"].as<std::string>();
  io.precision = r["precision"].as<std::string>();
  io.batch = int_flag(r, batch);
  io.max_length = int_flag(r, max_length);
  io.threads = static_cast<int>(int_flag(r, threads));
  io.skip_bad_lines = r.count("skip-bad-lines") > 0;
  if (r.count("cased")) io.lower_case = false;
  io.allow_initialized = r.count("allow-untrained-head") > 0;
  if (isatty(STDERR_FILENO))
    io.progress = [](const std::string& line) { std::cerr << line << "\n" << std::flush; };
  else
    io.progress = [](const std::string& line) {
      if (line.rfind("skipped ", 0) == 0) std::cerr << line << "\n";
    };
  const auto s = joule::models::infer::run_inference(io);
  std::cout << s.notes << s.precision_reason << "\n";
  char line[400];
  std::snprintf(line, sizeof line,
                "%lld lines -> %s: %lld inferred, %lld skipped, %lld truncated; %lld batches, %.1f %% padding; "
                "forward %.2f s (%.1f lines/s)\n",
                static_cast<long long>(s.lines), io.output.c_str(), static_cast<long long>(s.inferred),
                static_cast<long long>(s.skipped), static_cast<long long>(s.truncated),
                static_cast<long long>(s.batches),
                s.padded_tokens > 0 ? 100.0 * static_cast<double>(s.padded_tokens - s.tokens) / s.padded_tokens : 0.0,
                s.seconds, s.seconds > 0 ? static_cast<double>(s.inferred) / s.seconds : 0.0);
  std::cout << line << std::flush;
  return 0;
}

int cmd_bench_infer(int argc, char** argv) {
  cxxopts::Options o(
      "joule bench infer",
      "inference throughput and p50/p99 latency of a BERT/LayoutLM classifier per batch size, with energy "
      "and cost per million inferences");
  o.add_options()("model", "preset (bert-base, bert-large, layoutlm-base) or model directory",
                  cxxopts::value<std::string>()->default_value("bert-base"))(
      "architecture", "HuggingFace class (default: the directory's; a preset: its sequence or token classifier)",
      cxxopts::value<std::string>()->default_value(""))("batches", "batch sizes, comma-separated",
                                                        cxxopts::value<std::string>()->default_value("1,2,4,8,16"))(
      "precision", "auto, fp32 or bf16", cxxopts::value<std::string>()->default_value("auto"))(
      "instance", "instance profile for the price (configs/hardware)",
      cxxopts::value<std::string>()->default_value("cpu-host"))("json", "one JSON line instead of the table")(
      "region", "grid region for CO2", cxxopts::value<std::string>()->default_value("world"))(
      "out",
      "also write the result as an inference run, DIR/inference.json (`joule summary DIR`, `joule report DIR`, "
      "`joule plan --inference --measured DIR`)",
      cxxopts::value<std::string>())(
      "profile",
      "write the timed calls of the one batch size as a Chrome trace (tools/bench/op_profile.py --steps CALLS sums it "
      "per op)",
      cxxopts::value<std::string>()->default_value(""));
  const NumberFlag seq_len{"seq-len", "tokens per sequence", "128", kSeqLen};
  const NumberFlag labels{"labels", "a classifier's labels", "0", {0, 65536}, "0: the directory's id2label, else 2"};
  const NumberFlag threads{"threads", "intra-op threads", "0", kThreads, "0: every core"};
  const NumberFlag seconds{"seconds", "timed seconds per batch size", "2", {0.01, 3600}};
  const NumberFlag p99{"p99-ms", "latency bound: the best throughput whose p99 meets it", "0", {0, 1e6}, "0: none"};
  add_number_flags(o, {seq_len, labels, threads, seconds, p99});
  auto r = parse(o, argc, argv);
  joule::tools::InferBenchOptions io;
  io.model = r["model"].as<std::string>();
  io.architecture = r["architecture"].as<std::string>();
  io.precision = r["precision"].as<std::string>();
  io.instance = r["instance"].as<std::string>();
  io.region = r["region"].as<std::string>();
  io.seq_len = int_flag(r, seq_len);
  io.labels = int_flag(r, labels);
  io.threads = static_cast<int>(int_flag(r, threads));
  io.seconds = number_flag(r, seconds);
  io.p99_ms = number_flag(r, p99);
  io.profile = r["profile"].as<std::string>();
  io.batches.clear();
  std::stringstream list(r["batches"].as<std::string>());
  for (std::string item; std::getline(list, item, ',');) {
    size_t end = 0;
    long long b = -1;
    try {
      b = std::stoll(item, &end);
    } catch (const std::exception&) {
    }
    if (end != item.size() || b < 1) throw UsageError("--batches: '" + item + "' is not a positive batch size");
    io.batches.push_back(b);
  }
  const auto result = joule::tools::bench_infer(io);
  std::cout << (r.count("json") ? result.to_json() + "\n" : result.to_text()) << std::flush;
  if (r.count("out")) {
    const std::string file = joule::tools::write_inference_run(result, r["out"].as<std::string>());
    if (!r.count("json")) std::cout << "wrote " << file << "\n";
  }
  return 0;
}

int cmd_bench_model(int argc, char** argv) {
  cxxopts::Options o("joule bench model", "forward+backward throughput against this CPU's sgemm rate");
  o.add_options()("config", "preset name, config.json or model directory",
                  cxxopts::value<std::string>()->default_value("bert-base"))(
      "precision", "auto, fp32 or bf16 (auto: bf16 where the CPU has AVX512-BF16 or AMX-BF16)",
      cxxopts::value<std::string>()->default_value("auto"))("json", "print one JSON object")(
      "fp32-gemm", "auto, blas or onednn: the library fp32 GEMMs run on (as train.fp32_gemm)",
      cxxopts::value<std::string>()->default_value("auto"));
  const NumberFlag seq_len{"seq-len", "tokens per sequence", "128", kSeqLen},
      batch{"batch", "sequences per step", "8", kBatch},
      max_pred{"max-pred", "masked positions per sequence", "20", kPredictions},
      threads{"threads", "intra-op threads", "0", kThreads, "0: all cores"},
      iterations{"iterations", "timed steps", "6", kRepeats}, warmup{"warmup", "untimed steps first", "2", kWarmup};
  add_number_flags(o, {seq_len, batch, max_pred, threads, iterations, warmup});
  auto r = parse(o, argc, argv);
  joule::tools::ModelBenchOptions b;
  b.config = joule::tools::resolve_model_config(r["config"].as<std::string>());
  b.seq_len = int_flag(r, seq_len);
  b.batch = int_flag(r, batch);
  b.max_predictions = int_flag(r, max_pred);
  b.threads = static_cast<int>(int_flag(r, threads));
  b.iterations = static_cast<int>(int_flag(r, iterations));
  b.warmup = static_cast<int>(int_flag(r, warmup));
  b.precision = r["precision"].as<std::string>();
  b.fp32_gemm = r["fp32-gemm"].as<std::string>();
  std::string warning;
  joule::tools::version_report(&warning, /*with_gemm_path=*/false);  // bench_model measures it
  if (!warning.empty()) std::cerr << warning;
  auto result = joule::tools::bench_model(b);
  std::cout << (r.count("json") ? result.to_json() + "\n" : result.to_text(b));
  return 0;
}

// Takes every `--NAME VALUE` and `--NAME=VALUE` out of argv, in order, before cxxopts sees them: cxxopts splits a
// repeatable flag's value at commas, and a --set value may hold one (a path, a list of meters).
std::vector<std::string> take_flag_values(int& argc, char** argv, const std::string& name) {
  const std::string flag = "--" + name;
  std::vector<std::string> values;
  int kept = 1;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == flag) {
      if (i + 1 >= argc) throw UsageError(flag + " needs a value");
      values.emplace_back(argv[++i]);
    } else if (a.rfind(flag + "=", 0) == 0) {
      values.push_back(a.substr(flag.size() + 1));
    } else {
      argv[kept++] = argv[i];
    }
  }
  argc = kept;
  return values;
}

int cmd_train(int argc, char** argv) {
  const std::vector<std::string> sets = take_flag_values(argc, argv, "set");
  cxxopts::Options o("joule train", "pretrain BERT; launch with mpirun -np N or srun --mpi=pmix");
  o.add_options()("config", "run config (TOML)", cxxopts::value<std::string>())(
      "set", "override a key: table.key=value (repeatable; the value may hold commas)", cxxopts::value<std::string>())(
      "run-dir", "run directory (run.dir)", cxxopts::value<std::string>())("data", "training shards (data.train)",
                                                                           cxxopts::value<std::string>())(
      "eval-data", "held-out shards (data.eval)", cxxopts::value<std::string>())("vocab", "vocab.txt (data.vocab)",
                                                                                 cxxopts::value<std::string>())(
      "model", "preset, config.json or HF model directory (model.config)", cxxopts::value<std::string>())(
      "steps", "optimizer steps (train.steps)", cxxopts::value<std::string>())(
      "device", "cpu, cuda (one GPU per rank) or trainium-sim (train.device)", cxxopts::value<std::string>())(
      "precision", "auto, fp32 or bf16 (train.precision)", cxxopts::value<std::string>())(
      "fp32-gemm", "auto, blas or onednn: the library fp32 GEMMs run on (train.fp32_gemm)",
      cxxopts::value<std::string>())("sim-instance", "simulated cluster's instance profile (sim.instance)",
                                     cxxopts::value<std::string>())(
      "sim-nodes", "simulated cluster's instances (sim.nodes)", cxxopts::value<std::string>())(
      "instance", "instance profile billed per node (accounting.instance)", cxxopts::value<std::string>())(
      "price-per-hour", "USD per instance-hour (accounting.price_per_hour)", cxxopts::value<std::string>())(
      "pue", "data-centre PUE (accounting.pue)", cxxopts::value<std::string>())(
      "region", "grid region for CO2 (accounting.region)", cxxopts::value<std::string>())(
      "grid-intensity", "g CO2 per kWh (accounting.grid_intensity)", cxxopts::value<std::string>())(
      "resume", "auto (newest complete checkpoint) or a checkpoint directory",
      cxxopts::value<std::string>()->default_value(""))(
      "accept-data-change",
      "resume onto data that differs from what the checkpoint recorded, as a new data segment (otherwise an error)");
  auto r = parse(o, argc, argv);
  joule::trainer::TrainRequest t;
  t.config = joule::trainer::RunConfig::from_toml_file(required(r, "config"));
  const std::pair<const char*, const char*> named[] = {{"run-dir", "run.dir"},
                                                       {"data", "data.train"},
                                                       {"eval-data", "data.eval"},
                                                       {"vocab", "data.vocab"},
                                                       {"model", "model.config"},
                                                       {"steps", "train.steps"},
                                                       {"device", "train.device"},
                                                       {"precision", "train.precision"},
                                                       {"fp32-gemm", "train.fp32_gemm"},
                                                       {"sim-instance", "sim.instance"},
                                                       {"sim-nodes", "sim.nodes"},
                                                       {"instance", "accounting.instance"},
                                                       {"price-per-hour", "accounting.price_per_hour"},
                                                       {"pue", "accounting.pue"},
                                                       {"region", "accounting.region"},
                                                       {"grid-intensity", "accounting.grid_intensity"}};
  for (const auto& [flag, key] : named)
    if (r.count(flag)) t.config.set(std::string(key) + "=" + r[flag].as<std::string>(), std::string("--") + flag);
  for (const std::string& a : sets) t.config.set(a);
  const bool eval_named = r.count("eval-data") > 0 || std::any_of(sets.begin(), sets.end(), [](const std::string& a) {
                            return a.rfind("data.eval=", 0) == 0;
                          });
  t.eval_from_data_root = r.count("data") > 0 && !eval_named;
  t.config.validate();
  t.resume = r["resume"].as<std::string>();
  t.accept_data_change = r.count("accept-data-change") > 0;
  t.presets_dir = joule::tools::config_dir() + "/models";
  t.config_dir = joule::tools::config_dir();
  return joule::trainer::train(t);
}

int cmd_summary(int argc, char** argv) {
  cxxopts::Options o("joule summary", "print a run's training-cost summary and rewrite its emissions.csv");
  o.add_options()("run", "run directory (also as the first argument)", cxxopts::value<std::string>())(
      "json", "print the summary as JSON (summary.json's keys; its schema_version says which)");
  o.parse_positional({"run"});
  o.positional_help("RUN").show_positional_help();
  auto r = parse(o, argc, argv);
  std::cout << joule::tools::run_summary(required(r, "run"), r.count("json") > 0);
  return 0;
}

int cmd_report(int argc, char** argv) {
  cxxopts::Options o("joule report", "write a self-contained HTML report of a run (SVG charts)");
  o.add_options()("run", "run directory (also as the first argument)", cxxopts::value<std::string>())(
      "out", "output file (default RUN/report.html)", cxxopts::value<std::string>()->default_value(""));
  const NumberFlag nodes_flag{"nodes", "instances per profile for the workload projection", "16", kNodes};
  add_number_flags(o, {nodes_flag});
  o.parse_positional({"run"});
  o.positional_help("RUN").show_positional_help();
  auto r = parse(o, argc, argv);
  const int nodes = static_cast<int>(int_flag(r, nodes_flag));
  std::cout << joule::tools::write_report(required(r, "run"), r["out"].as<std::string>(), joule::tools::config_dir(),
                                          nodes)
            << "\n";
  return 0;
}

int cmd_plan(int argc, char** argv) {
  const std::vector<std::string> instance_args = take_flag_values(argc, argv, "instance");  // a path may hold a comma
  cxxopts::Options o("joule plan",
                     "predict hours, seq/hour, kWh, USD and CO2 of a workload on N instances of each profile");
  o.add_options()("model", "model preset or config.json", cxxopts::value<std::string>()->default_value("bert-large"))(
      "precision", "compute dtype: bf16, fp16, tf32, fp32", cxxopts::value<std::string>()->default_value("bf16"))(
      "shard",
      "none or zero1: LAMB's state whole on every device, or split over them (reduce-scatter + all-gather instead of "
      "the all-reduce; optimizer.shard)",
      cxxopts::value<std::string>()->default_value("none"))(
      "instance",
      "instance profile, or PROFILE:PRECISION for that row (repeatable, or comma-separated; default: every "
      "accelerator profile at --precision)",
      cxxopts::value<std::string>())("region", "grid region for CO2",
                                     cxxopts::value<std::string>()->default_value("world"))(
      "scaling", "node counts for the scaling curve", cxxopts::value<std::string>()->default_value("1,2,4,8,16,32,64"))(
      "json", "print {\"rows\": [...], \"scaling\": [...]}")(
      "validate", "print the model's validation against published figures (VALIDATION.md's table)")(
      "study",
      "print the seed study's comparison beside the model's (its own workload: BERT-Large phase 1, 450M sequences, "
      "16 x trn1.32xlarge vs 16 x p4d.24xlarge; the other flags do not apply)")(
      "inference",
      "size an inference fleet instead: per inference instance profile (configs/hardware/inference; --instance "
      "picks) the throughput within --p99-ms, instances for --rate with --headroom, USD/kWh/CO2 per million "
      "(--model defaults to layoutlm-base; with --validate: the inference validation table)")(
      "rate", "(--inference) inferences with a unit: 1000000/h, 278/s, 16667/min",
      cxxopts::value<std::string>()->default_value("1000000/h"))(
      "measured",
      "(--inference) `joule bench infer --json` outputs or inference runs (`--out DIR`), comma-separated: FILE adds "
      "this host's row, PROFILE=FILE a "
      "measurement taken on that instance",
      cxxopts::value<std::string>())("csv", "(--inference) print the rows as CSV");
  const NumberFlag seq_len{"seq-len", "sequence length", "128", kSeqLen},
      max_pred{"max-predictions", "masked positions per sequence", "0", kPredictions, "0: 20 at 128, 80 at 512"},
      global_batch{"global-batch", "sequences per optimizer step", "65536", OptionRange{1, 1 << 30}},
      micro_batch{"micro-batch", "sequences per device per forward/backward", "32", kBatch},
      sequences{"sequences", "sequences to train on", "450e6", OptionRange{1, 1e15}},
      nodes{"nodes", "instances", "16", kNodes},
      grid{"grid-intensity", "g CO2 per kWh (overrides --region)", "0", OptionRange{0, 5000}, "0: the region's"},
      seq{"seq", "(--inference) tokens per inference, as --seq-len", nullptr, kSeqLen},
      p99{"p99-ms", "(--inference) latency bound of one batch call, milliseconds", "0", OptionRange{0, 1e6}, "0: none"},
      headroom{"headroom", "(--inference) spare capacity over the rate", "0.2", OptionRange{0, 10}};
  add_number_flags(o, {seq_len, max_pred, global_batch, micro_batch, sequences, nodes, grid, seq, p99, headroom});
  auto r = parse(o, argc, argv);
  const std::string configs = joule::tools::config_dir();
  // Flags of one mode only are refused in the other, never silently ignored.
  auto refuse = [&r](std::initializer_list<const char*> flags, const std::string& why) {
    for (const char* f : flags)
      if (r.count(f)) throw UsageError("--" + std::string(f) + " " + why);
  };
  if (r.count("json") && r.count("csv")) throw UsageError("--json and --csv: choose one");
  if (r.count("inference")) {
    refuse({"precision", "shard", "scaling", "nodes", "global-batch", "micro-batch", "sequences", "max-predictions",
            "study"},
           "plans training; --inference sizes an inference fleet (see joule plan --help)");
    if (r.count("seq") && r.count("seq-len") && int_flag(r, seq) != int_flag(r, seq_len))
      throw UsageError("--seq and --seq-len disagree: give one");
    if (r.count("validate")) {
      std::cout << joule::trainer::validation_table(joule::trainer::inference_validation_cases(configs));
      return 0;
    }
    joule::tools::InferencePlanOptions p;
    p.model = r.count("model") ? r["model"].as<std::string>() : "layoutlm-base";
    p.seq_len = r.count("seq") ? int_flag(r, seq) : int_flag(r, seq_len);
    p.rate_per_hour = joule::tools::parse_rate_per_hour(r["rate"].as<std::string>());
    p.p99_ms = number_flag(r, p99);
    p.headroom = number_flag(r, headroom);
    for (const std::string& v : instance_args) {
      std::stringstream items(v);
      for (std::string item; std::getline(items, item, ',');) p.instances.push_back(item);
    }
    if (r.count("measured")) {
      const std::string list = r["measured"].as<std::string>();
      std::stringstream items(list);
      for (std::string item; std::getline(items, item, ',');) p.measured.push_back(item);
      if (list.empty() || list.back() == ',') p.measured.push_back("");  // refused, naming the flag
    }
    p.region = r["region"].as<std::string>();
    p.grid_intensity = number_flag(r, grid);
    std::cout << (r.count("json")  ? joule::tools::inference_plan_json(p, configs)
                  : r.count("csv") ? joule::tools::inference_plan_csv(p, configs)
                                   : joule::tools::inference_plan_text(p, configs));
    return 0;
  }
  refuse({"rate", "measured", "csv", "seq", "p99-ms", "headroom"}, "sizes an inference fleet: add --inference");
  if (r.count("validate")) {
    std::cout << joule::trainer::validation_table(joule::trainer::validation_cases(configs));
    return 0;
  }
  if (r.count("study")) {
    std::cout << joule::trainer::study_text(joule::trainer::study_comparison(configs));
    return 0;
  }
  joule::tools::PlanOptions p;
  p.model = r["model"].as<std::string>();
  p.seq_len = int_flag(r, seq_len);
  p.max_predictions = int_flag(r, max_pred);
  p.global_batch = int_flag(r, global_batch);
  p.micro_batch = int_flag(r, micro_batch);
  p.sequences = number_flag(r, sequences);
  p.precision = r["precision"].as<std::string>();
  p.shard = r["shard"].as<std::string>();
  if (p.shard != "none" && p.shard != "zero1") throw UsageError("--shard is '" + p.shard + "'; valid: none, zero1");
  p.nodes = static_cast<int>(int_flag(r, nodes));
  for (const std::string& v : instance_args) {
    // "p4d.24xlarge,p5.48xlarge" is two profiles; a profile file whose path holds a comma is one.
    std::error_code ec;
    if (std::filesystem::exists(v, ec) || std::filesystem::exists(v.substr(0, v.rfind(':')), ec)) {
      p.instances.push_back(v);
      continue;
    }
    std::stringstream items(v);
    for (std::string item; std::getline(items, item, ',');) p.instances.push_back(item);
  }
  p.region = r["region"].as<std::string>();
  p.grid_intensity = number_flag(r, grid);
  p.scaling.clear();
  std::stringstream ss(r["scaling"].as<std::string>());
  for (std::string item; std::getline(ss, item, ',');)
    p.scaling.push_back(static_cast<int>(joule::tools::checked_int(item, "--scaling: node count", kNodes)));
  if (p.scaling.empty()) throw UsageError("--scaling is empty: give node counts such as 1,2,4,8");
  std::cout << (r.count("json") ? joule::tools::plan_json(p, configs) : joule::tools::plan_text(p, configs));
  return 0;
}

int cmd_eval(int argc, char** argv) {
  cxxopts::Options o("joule eval", "masked-LM and NSP accuracy of a model directory on shards");
  o.add_options()("model", "HF model directory", cxxopts::value<std::string>())("data", "shards",
                                                                                cxxopts::value<std::string>())(
      "precision", "auto, fp32 or bf16 (auto: bf16 where the CPU has AVX512-BF16 or AMX-BF16)",
      cxxopts::value<std::string>()->default_value("auto"))(
      "dump", "also write the first batch, joule's logits on it and its losses to this safetensors file",
      cxxopts::value<std::string>()->default_value(""))(
      "fp32-gemm", "auto, blas or onednn: the library fp32 GEMMs run on (as train.fp32_gemm)",
      cxxopts::value<std::string>()->default_value("auto"));
  const NumberFlag batch{"batch", "sequences per batch", "32", kBatch},
      max_batches{"max-batches", "batches to evaluate", "0", OptionRange{0, 1e12}, "0: all"};
  add_number_flags(o, {batch, max_batches});
  auto r = parse(o, argc, argv);
  const auto precision =
      joule::models::choose_precision(r["precision"].as<std::string>(), false, joule::launch::CpuIsa::current());
  const joule::launch::GemmPath gemm = joule::launch::choose_gemm_path(r["fp32-gemm"].as<std::string>());
  const std::string result =
      joule::trainer::evaluate_model_dir(required(r, "model"), required(r, "data"), int_flag(r, batch),
                                         int_flag(r, max_batches), precision.precision, r["dump"].as<std::string>(),
                                         gemm.choice.fp32)
          .to_json()
          .dump();
  // After the evaluation: an error is not preceded by them.
  std::cerr << "joule eval: " << precision.reason << "\ngemm: " << gemm.line() << "\n";
  std::cout << result << "\n";
  return 0;
}

int cmd_export(int argc, char** argv) {
  cxxopts::Options o("joule export", "a checkpoint (or a run directory's newest) as a HuggingFace model directory");
  o.add_options()("checkpoint", "checkpoint or run directory", cxxopts::value<std::string>())(
      "out", "output HF model directory", cxxopts::value<std::string>());
  auto r = parse(o, argc, argv);
  const std::string used = joule::trainer::export_checkpoint(required(r, "checkpoint"), required(r, "out"));
  std::cout << "exported " << used << " to " << r["out"].as<std::string>() << "\n";
  return 0;
}

int cmd_bench_train(int argc, char** argv) {
  cxxopts::Options o(
      "joule bench train",
      "the whole training step (dropout, bucketed all-reduce, LAMB) on synthetic batches; run under mpirun");
  o.add_options()("config", "model preset, config.json or model directory",
                  cxxopts::value<std::string>()->default_value("bert-base"))(
      "precision", "auto, fp32 or bf16 (auto: bf16 where the CPU has AVX512-BF16 or AMX-BF16)",
      cxxopts::value<std::string>()->default_value("auto"))(
      "wire", "all-reduce buffer dtype: fp32 or bf16 (gradients stay fp32; bf16 halves the bytes sent)",
      cxxopts::value<std::string>()->default_value("fp32"))(
      "profile", "write rank 0's timed steps as a Chrome trace (tools/bench/op_profile.py sums it per op)",
      cxxopts::value<std::string>()->default_value(""))("device", "cpu or cuda (one GPU per rank)",
                                                        cxxopts::value<std::string>()->default_value("cpu"))(
      "fp32-gemm", "auto, blas or onednn: the library fp32 GEMMs run on (train.fp32_gemm)",
      cxxopts::value<std::string>()->default_value("auto"))(
      "shard", "none or zero1: the optimizer state whole on every rank or split over the ranks (optimizer.shard)",
      cxxopts::value<std::string>()->default_value("none"));
  const NumberFlag seq_len{"seq-len", "sequence length", "128", kSeqLen},
      micro_batch{"micro-batch", "sequences per rank per step", "8", kBatch},
      max_pred{"max-predictions", "masked positions per sequence", "20", kPredictions},
      threads{"threads", "intra-op threads per rank", "0", kThreads, "0: cores / local ranks"},
      warmup{"warmup", "untimed steps", "2", kWarmup}, steps{"steps", "timed steps", "5", kRepeats},
      peak{"peak-tflops", "the device's dense peak TFLOP/s at --precision: adds \"mfu\" (H100/H200 SXM bf16: 989)", "0",
           OptionRange{0, 1e6}, "0: none"};
  add_number_flags(o, {seq_len, micro_batch, max_pred, threads, warmup, steps, peak});
  auto r = parse(o, argc, argv);
  joule::tools::TrainBenchOptions b;
  b.device = r["device"].as<std::string>();
  b.peak_tflops = number_flag(r, peak);
  if (b.device != "cpu" && b.device != "cuda") throw UsageError("--device is '" + b.device + "'; valid: cpu, cuda");
  b.profile = r["profile"].as<std::string>();
  b.model_name = r["config"].as<std::string>();
  b.config = joule::tools::resolve_model_config(b.model_name);
  b.seq_len = int_flag(r, seq_len);
  b.micro_batch = int_flag(r, micro_batch);
  b.max_predictions = int_flag(r, max_pred);
  b.threads = static_cast<int>(int_flag(r, threads));
  b.warmup = static_cast<int>(int_flag(r, warmup));
  b.steps = static_cast<int>(int_flag(r, steps));
  b.precision = r["precision"].as<std::string>();
  b.wire = r["wire"].as<std::string>();
  b.fp32_gemm = r["fp32-gemm"].as<std::string>();
  b.shard = r["shard"].as<std::string>();
  const std::string line = joule::tools::bench_train(b);
  if (!line.empty()) std::cout << line << std::endl;
  return 0;
}

int cmd_bench_comm(int argc, char** argv) {
  cxxopts::Options o("joule bench comm",
                     "all-reduce busbw table and the bucketed reducer vs one all-reduce (run under mpirun)");
  o.add_options()("gradient-model", "model whose gradient the reducer moves (none: skip that part)",
                  cxxopts::value<std::string>()->default_value("bert-large"))(
      "pingpong", "first a rank 0 <-> rank 1 ping-pong: one-way times, and the alpha and beta they fit")(
      "overlap-model", "measure exposed communication in training steps of this model",
      cxxopts::value<std::string>()->default_value(""))("json", "JSON lines: one per table row, then a summary");
  const OptionRange message{4, 1e12};  // one float to a terabyte
  const NumberFlag min_bytes{"min-bytes", "smallest message", "1024", message},
      max_bytes{"max-bytes", "largest message", "268435456", message},
      iterations{"iterations", "timed repetitions per size", "5", kRepeats},
      alpha{"predict-alpha-us", "with --predict-mbps: each row's ring all-reduce time from the alpha-beta model", "0",
            OptionRange{0, 1e9}},
      mbps{"predict-mbps", "link bandwidth for the prediction, MB/s", "0", OptionRange{0, 1e9}, "0: no prediction"},
      overlap_batch{"overlap-batch", "sequences per rank in those steps", "8", kBatch},
      min_busbw{"min-busbw", "fail below this busbw (GB/s) at the largest size", "0", OptionRange{0, 1e6}, "0: none"};
  add_number_flags(o, {min_bytes, max_bytes, iterations, alpha, mbps, overlap_batch, min_busbw});
  auto r = parse(o, argc, argv);
  joule::tools::CommBenchOptions b;
  b.min_bytes = int_flag(r, min_bytes);
  b.max_bytes = int_flag(r, max_bytes);
  if (b.min_bytes > b.max_bytes)
    throw UsageError("--min-bytes " + std::to_string(b.min_bytes) + " is larger than --max-bytes " +
                     std::to_string(b.max_bytes));
  b.iterations = static_cast<int>(int_flag(r, iterations));
  b.gradient_model = r["gradient-model"].as<std::string>();
  b.overlap_model = r["overlap-model"].as<std::string>();
  b.overlap_batch = static_cast<int>(int_flag(r, overlap_batch));
  b.min_busbw = number_flag(r, min_busbw);
  b.json = r.count("json") > 0;
  b.pingpong = r.count("pingpong") > 0;
  b.predict_alpha_s = number_flag(r, alpha) * 1e-6;
  b.predict_bytes_per_s = number_flag(r, mbps) * 1e6;
  return joule::tools::bench_comm(b);
}

int cmd_bench_data(int argc, char** argv) {
  cxxopts::Options o("joule bench data", "sequences/s the loader delivers to one rank under the global shuffle");
  o.add_options()("data", "shard directory, glob, list file or shard", cxxopts::value<std::string>())(
      "json", "print one JSON object");
  const NumberFlag micro_batch{"micro-batch", "sequences per batch", "32", kBatch},
      global_batch{"global-batch", "sequences per optimizer step, all ranks", "0", OptionRange{0, 1e9},
                   "0: micro-batch x world size"},
      world_size{"world-size", "ranks the steps are split over", "1", OptionRange{1, 1e6}},
      rank{"rank", "the rank whose part is read", "0", OptionRange{0, 1e6}},
      batches{"batches", "timed batches", "200", kRepeats}, warmup{"warmup", "untimed batches first", "10", kWarmup};
  add_number_flags(o, {micro_batch, global_batch, world_size, rank, batches, warmup});
  auto r = parse(o, argc, argv);
  joule::tools::BenchDataOptions b;
  b.data = required(r, "data");
  b.micro_batch = int_flag(r, micro_batch);
  b.global_batch = int_flag(r, global_batch);
  b.world_size = static_cast<int>(int_flag(r, world_size));
  b.rank = static_cast<int>(int_flag(r, rank));
  b.batches = static_cast<int>(int_flag(r, batches));
  b.warmup = static_cast<int>(int_flag(r, warmup));
  b.json = r.count("json") > 0;
  std::cout << joule::tools::bench_data(b);
  return 0;
}

int cmd_data_synth(int argc, char** argv) {
  cxxopts::Options o("joule data synth", "write the deterministic synthetic demo corpus");
  o.add_options()("out", "output text file", cxxopts::value<std::string>());
  const NumberFlag documents{"documents", "number of documents", "2000", OptionRange{2, 1e9}},
      seed{"seed", "seed", "1", kSeeds};
  add_number_flags(o, {documents, seed});
  auto r = parse(o, argc, argv);
  joule::data::SynthOptions s;
  s.documents = int_flag(r, documents);
  s.seed = static_cast<uint64_t>(int_flag(r, seed));
  const int64_t n = joule::data::write_synthetic_corpus(required(r, "out"), s);
  std::cout << "wrote " << r["out"].as<std::string>() << ": " << s.documents << " documents, " << n << " sentences\n";
  return 0;
}

int cmd_data_vocab(int argc, char** argv) {
  const std::vector<std::string> inputs = take_flag_values(argc, argv, "input");  // a path may hold a comma
  cxxopts::Options o("joule data vocab", "build a WordPiece vocabulary from a corpus");
  o.add_options()("input", "text file (repeatable; the value may hold commas)", cxxopts::value<std::string>())(
      "out", "vocab.txt to write", cxxopts::value<std::string>())("lower-case", "lower-case and strip accents",
                                                                  cxxopts::value<bool>()->default_value("true"))(
      "no-lower-case", "keep case and accents")(
      "skip-bad-input", "skip and count invalid UTF-8 lines, over-long lines or documents and empty files");
  const NumberFlag size{"size", "vocabulary size, special tokens included", "8000", OptionRange{6, 1 << 24}},
      min_frequency{"min-frequency", "least count of a merged piece", "2", OptionRange{1, 1e15}};
  add_number_flags(o, {size, min_frequency});
  auto r = parse(o, argc, argv);
  if (inputs.empty()) throw UsageError("missing required option --input");
  joule::data::VocabBuildOptions v;
  v.inputs = inputs;
  v.size = int_flag(r, size);
  v.min_frequency = int_flag(r, min_frequency);
  v.lower_case = r["lower-case"].as<bool>() && !r.count("no-lower-case");
  v.skip_bad_input = r.count("skip-bad-input") > 0;
  const std::string out = required(r, "out");
  const auto vocab = joule::data::build_vocab(v);
  vocab.save(out);
  std::cout << "wrote " << out << ": " << vocab.size() << " tokens\n";
  return 0;
}

// An output directory as typed, made fit to have siblings (OUT.partial, OUT.old-PID) named after it: trailing slashes
// go ("shards/" is "shards"), and "." or ".." becomes the absolute path it stands for.
std::string output_directory(std::string out) {
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  const std::string last = std::filesystem::path(out).filename().string();
  if (last == "." || last == "..") out = std::filesystem::absolute(out).lexically_normal().string();
  while (out.size() > 1 && out.back() == '/') out.pop_back();
  return out;
}

// "2GB", "512MB", "1.5G", "800M", "4096" (bytes): binary units, as free(1) and Slurm's --mem.
int64_t parse_size(const std::string& flag, const std::string& text) {
  size_t used = 0;
  while (used < text.size() && (std::isdigit(static_cast<unsigned char>(text[used])) || text[used] == '.')) ++used;
  const double value = joule::parse_number_text(text.substr(0, used)).value_or(-1);
  std::string unit = text.substr(used);
  for (char& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (unit.size() > 1 && unit.back() == 'B') unit.pop_back();
  if (unit.size() > 1 && unit.back() == 'I') unit.pop_back();  // GiB, MiB
  const double scale = unit.empty() || unit == "B" ? 1
                       : unit == "K"               ? 1024.0
                       : unit == "M"               ? 1048576.0
                       : unit == "G"               ? 1073741824.0
                       : unit == "T"               ? 1099511627776.0
                                                   : -1;
  if (value <= 0 || scale < 0)
    throw UsageError("--" + flag + " \"" + text + "\": expected a size such as 512MB or 2GB");
  constexpr double kMost = 1125899906842624.0;  // 1 PiB: no machine's memory yet, and far from int64's end
  if (value * scale > kMost) throw UsageError("--" + flag + " \"" + text + "\": more than 1 PiB");
  return static_cast<int64_t>(value * scale);
}

int cmd_data_create(int argc, char** argv) {
  const std::vector<std::string> inputs = take_flag_values(argc, argv, "input");  // a path may hold a comma
  cxxopts::Options o("joule data create", "raw text + vocab.txt -> pretraining shards, streamed in bounded memory");
  o.add_options()(
      "input",
      "text: files, directories, glob patterns or @LIST files; plain or .gz; one sentence per line, a blank line "
      "between documents (repeatable; the value may hold commas)",
      cxxopts::value<std::string>())("vocab", "vocab.txt", cxxopts::value<std::string>())(
      "out", "output directory", cxxopts::value<std::string>())(
      "memory-budget", "peak memory to stay under (chunks are sized to it; up to 1 PiB)",
      cxxopts::value<std::string>()->default_value("2GB"))("lower-case", "lower-case and strip accents",
                                                           cxxopts::value<bool>()->default_value("true"))(
      "no-lower-case", "keep case and accents")("whole-word-mask", "mask whole words")(
      "skip-bad-input",
      "skip and count invalid UTF-8 lines, over-long lines or documents and empty files instead of stopping")(
      "replace", "replace an --out holding another data set (built in OUT.partial, swapped in when complete)");
  const NumberFlag phase_flag{"phase", "NVIDIA's phase presets", nullptr, OptionRange{1, 2},
                              "1 = --seq-len 128 --max-pred 20, 2 = --seq-len 512 --max-pred 80"},
      seq_len{"seq-len", "tokens per sequence", nullptr, OptionRange{8, 65535}, "default 128"},
      max_pred{"max-pred", "masked positions per sequence, at most --seq-len", nullptr, OptionRange{1, 65535},
               "default 20"},
      dupe_factor{"dupe-factor", "times each document is used with different masks", "5", OptionRange{1, 10000}},
      shards{"shards", "training shards: the input cut into this many equal parts (plain-text input)", "0",
             OptionRange{0, 1e6}, "0: from --shard-mb or the input's files"},
      shard_mb{"shard-mb", "input MB per training shard (instead of --shards)", "0", OptionRange{0, 1e7}, "0: none"},
      seed{"seed", "seed", "12345", kSeeds},
      masked_lm_prob{"masked-lm-prob", "fraction of tokens masked", "0.15", OptionRange{0, 1, true, false}},
      short_seq_prob{"short-seq-prob", "probability of a shorter target length", "0.1", OptionRange{0, 1}},
      eval_documents{"eval-documents", "documents of the first chunk held out for an eval shard", "0",
                     OptionRange{0, 1e12}},
      threads{"threads", "worker threads; the output does not depend on it", "0", kThreads, "0: all cores"};
  add_number_flags(o, {phase_flag, seq_len, max_pred, dupe_factor, shards, shard_mb, seed, masked_lm_prob,
                       short_seq_prob, eval_documents, threads});
  auto r = parse(o, argc, argv);
  if (inputs.empty()) throw UsageError("missing required option --input");
  joule::data::CreateOptions c;
  c.inputs = inputs;
  c.vocab = required(r, "vocab");
  c.out = output_directory(required(r, "out"));
  if (r.count("phase")) {
    const int64_t phase = int_flag(r, phase_flag);
    if (r.count("seq-len") || r.count("max-pred"))
      throw UsageError("--phase sets --seq-len and --max-pred: give one or the other");
    c.seq_len = phase == 1 ? 128 : 512;
    c.max_predictions = phase == 1 ? 20 : 80;
  }
  if (r.count("seq-len")) c.seq_len = static_cast<int>(int_flag(r, seq_len));
  if (r.count("max-pred")) c.max_predictions = static_cast<int>(int_flag(r, max_pred));
  if (c.max_predictions > c.seq_len)
    throw UsageError("--max-pred " + std::to_string(c.max_predictions) + " is more than --seq-len " +
                     std::to_string(c.seq_len) + ": a sequence cannot hold more masked positions than tokens");
  c.dupe_factor = static_cast<int>(int_flag(r, dupe_factor));
  c.shards = static_cast<int>(int_flag(r, shards));
  c.shard_mb = number_flag(r, shard_mb);
  if (c.shards > 0 && c.shard_mb > 0) throw UsageError("give --shards or --shard-mb, not both");
  c.memory_budget = parse_size("memory-budget", r["memory-budget"].as<std::string>());
  c.seed = static_cast<uint64_t>(int_flag(r, seed));
  c.lower_case = r["lower-case"].as<bool>() && !r.count("no-lower-case");
  c.whole_word_mask = r.count("whole-word-mask") > 0;
  c.masked_lm_prob = number_flag(r, masked_lm_prob);
  c.short_seq_prob = number_flag(r, short_seq_prob);
  c.eval_documents = int_flag(r, eval_documents);
  c.threads = static_cast<int>(int_flag(r, threads));
  c.replace = r.count("replace") > 0;
  c.skip_bad_input = r.count("skip-bad-input") > 0;
  const auto s = joule::data::create_pretraining_data(c);
  for (const std::string& note : s.notes) std::cout << "note: " << note << "\n";
  if (s.already_complete)
    std::cout << c.out << " already holds this data set (same inputs and arguments): nothing to do\n";
  if (s.resumed_chunks > 0)
    std::cout << "resumed: kept " << s.resumed_chunks << " verified shard(s) from an earlier run\n";
  if (s.skipped > 0)
    std::cout << "skipped " << s.skipped << " bad input item(s) (--skip-bad-input), the first: " << s.first_skip
              << "\n";
  std::cout << (s.already_complete ? "" : "wrote ") << c.out << ": " << s.train_sequences << " training sequences in "
            << s.train_shards.size() << " shard(s) from " << s.documents << " documents";
  if (s.eval_sequences)
    std::cout << ", " << s.eval_sequences << " eval sequences from " << s.eval_documents << " held-out documents";
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const std::string chunk = s.chunk_bytes >= (1 << 20) ? std::to_string((s.chunk_bytes + (1 << 19)) >> 20) + " MB"
                                                       : std::to_string((s.chunk_bytes + 512) >> 10) + " KB";
  std::cout << "; " << s.masked_predictions << " masked predictions; " << s.chunks << " chunk(s) of up to " << chunk
            << " of text; peak memory " << usage.ru_maxrss / 1024 << " MB (budget " << c.memory_budget / (1 << 20)
            << " MB)\n";
  return 0;
}

int cmd_data_inspect(int argc, char** argv) {
  cxxopts::Options o("joule data inspect", "counts, length histogram, masking rate and decoded samples");
  o.add_options()("data", "shard directory, glob, list file or shard (also positional)", cxxopts::value<std::string>())(
      "vocab", "vocab.txt (default: beside the data)", cxxopts::value<std::string>()->default_value(""));
  const NumberFlag samples{"samples", "sequences to decode", "3", OptionRange{0, 1e6}};
  add_number_flags(o, {samples});
  o.parse_positional({"data"});
  o.positional_help("[DATA]").show_positional_help();
  auto r = parse(o, argc, argv);
  std::cout << joule::tools::data_inspect(required(r, "data"), static_cast<int>(int_flag(r, samples)),
                                          r["vocab"].as<std::string>());
  return 0;
}

int cmd_data_tokenize(int argc, char** argv) {
  cxxopts::Options o("joule data tokenize", "WordPiece tokens of each stdin line");
  o.add_options()("vocab", "vocab.txt", cxxopts::value<std::string>())(
      "lower-case", "lower-case and strip accents (default)")("no-lower-case", "keep case and accents")(
      "speed", "print the tokenizer's throughput on stdin (one thread, text in memory) instead of the tokens");
  auto r = parse(o, argc, argv);
  if (r.count("lower-case") && r.count("no-lower-case"))
    throw UsageError("give --lower-case or --no-lower-case, not both");
  if (r.count("speed"))
    std::cout << joule::tools::tokenizer_speed(std::cin, required(r, "vocab"), !r.count("no-lower-case"));
  else
    joule::tools::data_tokenize(std::cin, std::cout, required(r, "vocab"), !r.count("no-lower-case"));
  return 0;
}

}  // namespace

// Prints an error and its "what to do" on every rank (one write per message, so lines from different ranks do not
// interleave), ends the whole job so that no rank is left waiting, and returns the exit code.
int report_error(const std::string& cmd, std::string what, std::string hint, int exit_code) {
  const std::string prefix = joule::launch::rank_prefix();
  // LibTorch's errors carry their C++ backtrace after the message: the message is what the user needs.
  if (const size_t trace = what.find("\nException raised from "); trace != std::string::npos) what.resize(trace);
  if (const size_t placeholder = hint.find("joule COMMAND"); placeholder != std::string::npos)
    hint.replace(placeholder, 13, "joule " + cmd);
  std::cerr << (prefix + "joule " + cmd + ": error: " + what + "\n" + prefix + "what to do: " + hint + "\n")
            << std::flush;
  joule::launch::abort_job_if_distributed(exit_code);
  return exit_code;
}

// Whether a serving command's GEMMs will run on OpenBLAS's own threads: fp32 (as set by --precision, or auto without
// native bf16 matmuls) on an OpenBLAS whose kernels match the CPU. Below it, auto moves the fp32 GEMMs to oneDNN, whose
// threads are OpenMP's. A --precision the command will reject counts as no: the command reports it.
bool serving_gemms_on_openblas(int argc, char** argv) {
  std::string precision = "auto";
  for (int i = 2; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--precision" && i + 1 < argc) precision = argv[i + 1];
    if (arg.rfind("--precision=", 0) == 0) precision = arg.substr(12);
  }
  try {
    if (joule::models::choose_precision(precision, /*cuda=*/false, joule::launch::CpuIsa::current()).precision !=
        joule::models::Precision::kFp32)
      return false;
    const joule::launch::BlasInfo blas = joule::launch::detect_blas();
    return !blas.core.empty() && !joule::launch::judge_detected_blas(blas).below;
  } catch (const std::exception&) {
    return false;
  }
}

int main(int argc, char** argv) {
#ifdef JOULE_FAULT_INJECTION
  joule::trainer::enable_fault_injection();  // the test binary joule-fault-injection: JOULE_FAULT acts (fault.h)
#endif
  // OpenMP and OpenBLAS read their wait policies only when they load: set them and start over once. The `data`
  // commands run no LibTorch or BLAS work, and a second start (loading LibTorch again) would double their start-up.
  const bool uses_libtorch_threads = !(argc > 1 && std::strcmp(argv[1], "data") == 0);
  // Inference runs alone on its cores: its OpenMP threads spin between parallel regions (launch/runtime.h).
  auto is = [&](const char* first, const char* second) {
    return argc > 1 && std::strcmp(argv[1], first) == 0 && (!second || (argc > 2 && std::strcmp(argv[2], second) == 0));
  };
  const bool serving = is("infer", nullptr) || is("bench", "infer") || is("model", "forward");
  if (uses_libtorch_threads &&
      joule::launch::set_runtime_environment(serving, serving && serving_gemms_on_openblas(argc, argv)))
    execv("/proc/self/exe", argv);
  joule::launch::tune_allocator();
  joule::launch::install_caching_cpu_allocator();

  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    std::cout << kUsage;
    return args.empty() ? 2 : 0;
  }
  // Two-word commands ("model init") consume both words; cxxopts then sees the rest. A one-word command's next word
  // is its own (`joule report RUN`): the command's name in messages is the one matched.
  struct Entry {
    const char* name;
    int (*run)(int, char**);
  };
  const Entry commands[] = {{"train", cmd_train},
                            {"eval", cmd_eval},
                            {"export", cmd_export},
                            {"summary", cmd_summary},
                            {"report", cmd_report},
                            {"plan", cmd_plan},
                            {"version", cmd_version},
                            {"model init", cmd_model_init},
                            {"model info", cmd_model_info},
                            {"model forward", cmd_model_forward},
                            {"infer", cmd_infer},
                            {"bench infer", cmd_bench_infer},
                            {"bench model", cmd_bench_model},
                            {"bench comm", cmd_bench_comm},
                            {"bench train", cmd_bench_train},
                            {"bench data", cmd_bench_data},
                            {"data synth", cmd_data_synth},
                            {"data vocab", cmd_data_vocab},
                            {"data create", cmd_data_create},
                            {"data inspect", cmd_data_inspect},
                            {"data tokenize", cmd_data_tokenize}};
  const std::string two_words = args[0] + (args.size() > 1 && args[1].rfind("-", 0) != 0 ? " " + args[1] : "");
  const Entry* command = nullptr;
  for (const Entry& e : commands)
    if (e.name == two_words || e.name == args[0]) command = &e;
  if (!command) {
    std::string group;  // `joule data` alone: the group's commands
    for (const Entry& e : commands)
      if (std::string(e.name).rfind(args[0] + " ", 0) == 0) group += std::string(group.empty() ? "" : ", ") + e.name;
    if (!group.empty())
      return report_error(args[0], "'" + args[0] + "' needs one of its commands: " + group,
                          "run e.g. `joule " + group.substr(0, group.find(',')) + " --help`", 2);
    std::cerr << "joule: unknown command '" << two_words << "'\n\n" << kUsage;
    return 2;
  }
  const std::string cmd = command->name;
  const int words = cmd.find(' ') == std::string::npos ? 1 : 2;
  try {
    return command->run(argc - words, argv + words);
  } catch (const cxxopts::exceptions::exception& e) {
    // cxxopts's wording ("Option ‘bogus’ does not exist"), in joule's error form with plain quotes.
    std::string what = e.what();
    for (const char* quote : {"\u2018", "\u2019"})
      for (size_t at; (at = what.find(quote)) != std::string::npos;) what.replace(at, std::strlen(quote), "'");
    return report_error(cmd, what, "see `joule " + cmd + " --help` for the flags and their values", 2);
  } catch (const joule::Error& e) {
    return report_error(cmd, e.what(), e.hint(), e.exit_code());
  } catch (const std::filesystem::filesystem_error& e) {
    // A file system call that joule did not check itself: still the path and the cause, not the library's wording.
    std::string what = e.path1().string() + ": " + e.code().message();
    if (!e.path2().empty()) what += " (and " + e.path2().string() + ")";
    return report_error(cmd, what, "check the path, its permissions and the free space, then rerun", 1);
  } catch (const std::exception& e) {
    // Not joule's own error type (LibTorch, the standard library): still one clear line on every rank.
    return report_error(cmd, e.what(),
                        "this error did not come with advice from joule; the message above names what failed", 1);
  }
}
