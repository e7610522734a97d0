// joule: the command-line glue. Parse arguments, build the objects, run; all logic lives in libraries.
#include <sys/resource.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "collectives/communicator.h"
#include "data/create.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "data/vocab_builder.h"
#include "launch/cpu_allocator.h"
#include "launch/runtime.h"
#include "models/bert_config.h"
#include "models/safetensors.h"
#include "tools/bench_comm.h"
#include "tools/bench_model.h"
#include "tools/bench_train.h"
#include "tools/data_commands.h"
#include "tools/model_commands.h"
#include "tools/plan.h"
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
    "  plan           hours, seq/hour, kWh, USD, CO2 on N x trn1/p4d/p5 (cluster performance model)\n"
    "  version        joule's version and the LibTorch, MPI, HDF5 and BLAS in use\n"
    "  model init     write a freshly initialized HuggingFace model directory\n"
    "  model info     parameter counts of a model config or directory\n"
    "  bench model    forward+backward throughput against this CPU's sgemm rate\n"
    "  bench comm     all-reduce busbw table and the bucketed reducer vs one all-reduce (under mpirun)\n"
    "  bench data     sequences/s the loader delivers from shards under the global shuffle\n"
    "  bench train    the whole training step at N ranks: seq/s, roofline fraction, peak RSS (under mpirun)\n"
    "  data synth     write the deterministic synthetic demo corpus\n"
    "  data vocab     build a WordPiece vocabulary from a corpus\n"
    "  data create    raw text + vocab.txt -> pretraining shards (NVIDIA HDF5 layout)\n"
    "  data inspect   counts, length histogram, masking rate and decoded samples of shards\n"
    "  data tokenize  WordPiece tokens of each stdin line (to compare tokenizers)\n";

using joule::UsageError;

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
  return r[key].as<std::string>();
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
      "seed", "initialization seed", cxxopts::value<uint64_t>()->default_value("0"))(
      "out", "output directory", cxxopts::value<std::string>())("dtype", "F32, F16 or BF16",
                                                                cxxopts::value<std::string>()->default_value("F32"));
  auto r = parse(o, argc, argv);
  std::cout << joule::tools::model_init(required(r, "config"), r["seed"].as<uint64_t>(), required(r, "out"),
                                        r["dtype"].as<std::string>())
            << "\n";
  return 0;
}

int cmd_model_info(int argc, char** argv) {
  cxxopts::Options o("joule model info", "parameter counts of a model config or directory");
  o.add_options()("config", "preset name, config.json or model directory", cxxopts::value<std::string>())(
      "dir", "model directory (also accepted positionally)", cxxopts::value<std::string>());
  o.parse_positional({"dir"});
  auto r = parse(o, argc, argv);
  if (r.count("config") == r.count("dir")) throw UsageError("give either a model directory or --config");
  std::cout << joule::tools::model_info(r.count("dir") ? r["dir"].as<std::string>() : r["config"].as<std::string>());
  return 0;
}

int cmd_bench_model(int argc, char** argv) {
  cxxopts::Options o("joule bench model", "forward+backward throughput against this CPU's sgemm rate");
  o.add_options()("config", "preset name, config.json or model directory",
                  cxxopts::value<std::string>()->default_value("bert-base"))(
      "seq-len", "tokens per sequence", cxxopts::value<int64_t>()->default_value("128"))(
      "batch", "sequences per step", cxxopts::value<int64_t>()->default_value("8"))(
      "max-pred", "masked positions per sequence", cxxopts::value<int64_t>()->default_value("20"))(
      "threads", "intra-op threads (0: all cores)", cxxopts::value<int>()->default_value("0"))(
      "iterations", "timed steps", cxxopts::value<int>()->default_value("6"))(
      "warmup", "untimed steps first", cxxopts::value<int>()->default_value("2"))(
      "precision", "auto, fp32 or bf16 (auto: bf16 where the CPU has AVX512-BF16 or AMX-BF16)",
      cxxopts::value<std::string>()->default_value("auto"))("json", "print one JSON object");
  auto r = parse(o, argc, argv);
  joule::tools::ModelBenchOptions b;
  b.config = joule::tools::resolve_model_config(r["config"].as<std::string>());
  b.seq_len = r["seq-len"].as<int64_t>();
  b.batch = r["batch"].as<int64_t>();
  b.max_predictions = r["max-pred"].as<int64_t>();
  b.threads = r["threads"].as<int>();
  b.iterations = r["iterations"].as<int>();
  b.warmup = r["warmup"].as<int>();
  b.precision = r["precision"].as<std::string>();
  std::string warning;
  joule::tools::version_report(&warning);
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
      "sim-instance", "simulated cluster's instance profile (sim.instance)", cxxopts::value<std::string>())(
      "sim-nodes", "simulated cluster's instances (sim.nodes)", cxxopts::value<std::string>())(
      "instance", "instance profile billed per node (accounting.instance)", cxxopts::value<std::string>())(
      "price-per-hour", "USD per instance-hour (accounting.price_per_hour)", cxxopts::value<std::string>())(
      "pue", "data-centre PUE (accounting.pue)", cxxopts::value<std::string>())(
      "region", "grid region for CO2 (accounting.region)", cxxopts::value<std::string>())(
      "grid-intensity", "g CO2 per kWh (accounting.grid_intensity)", cxxopts::value<std::string>())(
      "resume", "auto (newest complete checkpoint) or a checkpoint directory",
      cxxopts::value<std::string>()->default_value(""));
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
                                                       {"sim-instance", "sim.instance"},
                                                       {"sim-nodes", "sim.nodes"},
                                                       {"instance", "accounting.instance"},
                                                       {"price-per-hour", "accounting.price_per_hour"},
                                                       {"pue", "accounting.pue"},
                                                       {"region", "accounting.region"},
                                                       {"grid-intensity", "accounting.grid_intensity"}};
  for (const auto& [flag, key] : named)
    if (r.count(flag)) t.config.set(std::string(key) + "=" + r[flag].as<std::string>());
  for (const std::string& a : sets) t.config.set(a);
  t.config.validate();
  t.resume = r["resume"].as<std::string>();
  t.presets_dir = joule::tools::config_dir() + "/models";
  t.config_dir = joule::tools::config_dir();
  return joule::trainer::train(t);
}

int cmd_summary(int argc, char** argv) {
  cxxopts::Options o("joule summary", "print a run's training-cost summary and rewrite its emissions.csv");
  o.add_options()("run", "run directory", cxxopts::value<std::string>());
  o.parse_positional({"run"});
  auto r = parse(o, argc, argv);
  std::cout << joule::tools::run_summary(required(r, "run"));
  return 0;
}

int cmd_report(int argc, char** argv) {
  cxxopts::Options o("joule report", "write a self-contained HTML report of a run (SVG charts)");
  o.add_options()("run", "run directory", cxxopts::value<std::string>())(
      "out", "output file (default RUN/report.html)", cxxopts::value<std::string>()->default_value(""))(
      "nodes", "instances per profile for the workload projection", cxxopts::value<int>()->default_value("16"));
  o.parse_positional({"run"});
  auto r = parse(o, argc, argv);
  const int nodes = r["nodes"].as<int>();
  if (nodes < 1) throw UsageError("--nodes must be >= 1");
  std::cout << joule::tools::write_report(required(r, "run"), r["out"].as<std::string>(), joule::tools::config_dir(),
                                          nodes)
            << "\n";
  return 0;
}

int cmd_plan(int argc, char** argv) {
  cxxopts::Options o("joule plan",
                     "predict hours, seq/hour, kWh, USD and CO2 of a workload on N instances of each profile");
  o.add_options()("model", "model preset or config.json", cxxopts::value<std::string>()->default_value("bert-large"))(
      "seq-len", "sequence length", cxxopts::value<int64_t>()->default_value("128"))(
      "max-predictions", "masked positions per sequence (0: 20 at 128, 80 at 512)",
      cxxopts::value<int64_t>()->default_value("0"))("global-batch", "sequences per optimizer step",
                                                     cxxopts::value<int64_t>()->default_value("65536"))(
      "micro-batch", "sequences per device per forward/backward", cxxopts::value<int64_t>()->default_value("32"))(
      "sequences", "sequences to train on", cxxopts::value<std::string>()->default_value("450e6"))(
      "precision", "compute dtype: bf16, fp16, tf32, fp32", cxxopts::value<std::string>()->default_value("bf16"))(
      "nodes", "instances", cxxopts::value<int>()->default_value("16"))(
      "instance",
      "instance profile, or PROFILE:PRECISION for that row (repeatable; default: every accelerator profile at "
      "--precision)",
      cxxopts::value<std::vector<std::string>>())("region", "grid region for CO2",
                                                  cxxopts::value<std::string>()->default_value("world"))(
      "grid-intensity", "g CO2 per kWh (overrides --region)", cxxopts::value<double>()->default_value("0"))(
      "scaling", "node counts for the scaling curve", cxxopts::value<std::string>()->default_value("1,2,4,8,16,32,64"))(
      "json", "print {\"rows\": [...], \"scaling\": [...]}")(
      "validate", "print the model's validation against published figures (VALIDATION.md's table)");
  auto r = parse(o, argc, argv);
  const std::string configs = joule::tools::config_dir();
  if (r.count("validate")) {
    std::cout << joule::trainer::validation_table(joule::trainer::validation_cases(configs));
    return 0;
  }
  joule::tools::PlanOptions p;
  p.model = r["model"].as<std::string>();
  p.seq_len = r["seq-len"].as<int64_t>();
  p.max_predictions = r["max-predictions"].as<int64_t>();
  p.global_batch = r["global-batch"].as<int64_t>();
  p.micro_batch = r["micro-batch"].as<int64_t>();
  const std::string seqs = r["sequences"].as<std::string>();
  size_t used = 0;
  try {
    p.sequences = std::stod(seqs, &used);
  } catch (const std::exception&) {
  }
  if (used != seqs.size() || !(p.sequences > 0))
    throw UsageError("--sequences '" + seqs + "' is not a positive number");
  p.precision = r["precision"].as<std::string>();
  p.nodes = r["nodes"].as<int>();
  if (p.nodes < 1) throw UsageError("--nodes must be >= 1");
  if (r.count("instance")) p.instances = r["instance"].as<std::vector<std::string>>();
  p.region = r["region"].as<std::string>();
  p.grid_intensity = r["grid-intensity"].as<double>();
  p.scaling.clear();
  std::stringstream ss(r["scaling"].as<std::string>());
  for (std::string item; std::getline(ss, item, ',');) {
    const int n = std::atoi(item.c_str());
    if (n < 1) throw UsageError("--scaling: '" + item + "' is not a node count");
    p.scaling.push_back(n);
  }
  std::cout << (r.count("json") ? joule::tools::plan_json(p, configs) : joule::tools::plan_text(p, configs));
  return 0;
}

int cmd_eval(int argc, char** argv) {
  cxxopts::Options o("joule eval", "masked-LM and NSP accuracy of a model directory on shards");
  o.add_options()("model", "HF model directory", cxxopts::value<std::string>())(
      "data", "shards", cxxopts::value<std::string>())("batch", "sequences per batch",
                                                       cxxopts::value<int64_t>()->default_value("32"))(
      "max-batches", "batches to evaluate (0: all)", cxxopts::value<int64_t>()->default_value("0"))(
      "precision", "auto, fp32 or bf16 (auto: bf16 where the CPU has AVX512-BF16 or AMX-BF16)",
      cxxopts::value<std::string>()->default_value("auto"))(
      "dump", "also write the first batch, joule's logits on it and its losses to this safetensors file",
      cxxopts::value<std::string>()->default_value(""));
  auto r = parse(o, argc, argv);
  const auto precision =
      joule::models::choose_precision(r["precision"].as<std::string>(), false, joule::launch::CpuIsa::current());
  std::cerr << "joule eval: " << precision.reason << "\n";
  std::cout << joule::trainer::evaluate_model_dir(required(r, "model"), required(r, "data"), r["batch"].as<int64_t>(),
                                                  r["max-batches"].as<int64_t>(), precision.precision,
                                                  r["dump"].as<std::string>())
                   .to_json()
            << "\n";
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
      "seq-len", "sequence length", cxxopts::value<int64_t>()->default_value("128"))(
      "micro-batch", "sequences per rank per step", cxxopts::value<int64_t>()->default_value("8"))(
      "max-predictions", "masked positions per sequence", cxxopts::value<int64_t>()->default_value("20"))(
      "threads", "intra-op threads per rank (0: cores / local ranks)", cxxopts::value<int>()->default_value("0"))(
      "warmup", "untimed steps", cxxopts::value<int>()->default_value("2"))("steps", "timed steps",
                                                                            cxxopts::value<int>()->default_value("5"))(
      "precision", "auto, fp32 or bf16 (auto: bf16 where the CPU has AVX512-BF16 or AMX-BF16)",
      cxxopts::value<std::string>()->default_value("auto"))(
      "wire", "all-reduce buffer dtype: fp32 or bf16 (gradients stay fp32; bf16 halves the bytes sent)",
      cxxopts::value<std::string>()->default_value("fp32"))(
      "profile", "write rank 0's timed steps as a Chrome trace (tools/bench/op_profile.py sums it per op)",
      cxxopts::value<std::string>()->default_value(""))("device", "cpu or cuda (one GPU per rank)",
                                                        cxxopts::value<std::string>()->default_value("cpu"))(
      "peak-tflops", "the device's dense peak TFLOP/s at --precision: adds \"mfu\" (H100/H200 SXM bf16: 989)",
      cxxopts::value<double>()->default_value("0"));
  auto r = parse(o, argc, argv);
  joule::tools::TrainBenchOptions b;
  b.device = r["device"].as<std::string>();
  b.peak_tflops = r["peak-tflops"].as<double>();
  if (b.device != "cpu" && b.device != "cuda") throw UsageError("--device is '" + b.device + "'; valid: cpu, cuda");
  b.profile = r["profile"].as<std::string>();
  b.model_name = r["config"].as<std::string>();
  b.config = joule::tools::resolve_model_config(b.model_name);
  b.seq_len = r["seq-len"].as<int64_t>();
  b.micro_batch = r["micro-batch"].as<int64_t>();
  b.max_predictions = r["max-predictions"].as<int64_t>();
  b.threads = r["threads"].as<int>();
  b.warmup = r["warmup"].as<int>();
  b.steps = r["steps"].as<int>();
  b.precision = r["precision"].as<std::string>();
  b.wire = r["wire"].as<std::string>();
  if (b.steps < 1 || b.micro_batch < 1 || b.seq_len < 2)
    throw UsageError("--steps, --micro-batch and --seq-len must be positive");
  const std::string line = joule::tools::bench_train(b);
  if (!line.empty()) std::cout << line << std::endl;
  return 0;
}

int cmd_bench_comm(int argc, char** argv) {
  cxxopts::Options o("joule bench comm",
                     "all-reduce busbw table and the bucketed reducer vs one all-reduce (run under mpirun)");
  o.add_options()("min-bytes", "smallest message", cxxopts::value<int64_t>()->default_value("1024"))(
      "max-bytes", "largest message", cxxopts::value<int64_t>()->default_value("268435456"))(
      "iterations", "timed repetitions per size", cxxopts::value<int>()->default_value("5"))(
      "gradient-model", "model whose gradient the reducer moves (none: skip that part)",
      cxxopts::value<std::string>()->default_value("bert-large"))(
      "pingpong", "first a rank 0 <-> rank 1 ping-pong: one-way times, and the alpha and beta they fit")(
      "predict-alpha-us", "with --predict-mbps: each row's ring all-reduce time from the alpha-beta model",
      cxxopts::value<double>()->default_value("0"))("predict-mbps", "link bandwidth for the prediction, MB/s",
                                                    cxxopts::value<double>()->default_value("0"))(
      "overlap-model", "measure exposed communication in training steps of this model",
      cxxopts::value<std::string>()->default_value(""))("overlap-batch", "sequences per rank in those steps",
                                                        cxxopts::value<int>()->default_value("8"))(
      "min-busbw", "fail below this busbw (GB/s) at the largest size", cxxopts::value<double>()->default_value("0"))(
      "json", "JSON lines: one per table row, then a summary");
  auto r = parse(o, argc, argv);
  joule::tools::CommBenchOptions b;
  b.min_bytes = r["min-bytes"].as<int64_t>();
  b.max_bytes = r["max-bytes"].as<int64_t>();
  b.iterations = r["iterations"].as<int>();
  b.gradient_model = r["gradient-model"].as<std::string>();
  b.overlap_model = r["overlap-model"].as<std::string>();
  b.overlap_batch = r["overlap-batch"].as<int>();
  b.min_busbw = r["min-busbw"].as<double>();
  b.json = r.count("json") > 0;
  b.pingpong = r.count("pingpong") > 0;
  b.predict_alpha_s = r["predict-alpha-us"].as<double>() * 1e-6;
  b.predict_bytes_per_s = r["predict-mbps"].as<double>() * 1e6;
  return joule::tools::bench_comm(b);
}

int cmd_bench_data(int argc, char** argv) {
  cxxopts::Options o("joule bench data", "sequences/s the loader delivers from shards under the global shuffle");
  o.add_options()("data", "shard directory, glob, list file or shard", cxxopts::value<std::string>())(
      "micro-batch", "sequences per batch", cxxopts::value<int64_t>()->default_value("32"))(
      "batches", "timed batches", cxxopts::value<int>()->default_value("200"))(
      "warmup", "untimed batches first", cxxopts::value<int>()->default_value("10"))("json", "print one JSON object");
  auto r = parse(o, argc, argv);
  std::cout << joule::tools::bench_data(required(r, "data"), r["micro-batch"].as<int64_t>(), r["batches"].as<int>(),
                                        r["warmup"].as<int>(), r.count("json") > 0);
  return 0;
}

int cmd_data_synth(int argc, char** argv) {
  cxxopts::Options o("joule data synth", "write the deterministic synthetic demo corpus");
  o.add_options()("out", "output text file", cxxopts::value<std::string>())(
      "documents", "number of documents", cxxopts::value<int64_t>()->default_value("2000"))(
      "seed", "seed", cxxopts::value<uint64_t>()->default_value("1"));
  auto r = parse(o, argc, argv);
  joule::data::SynthOptions s;
  s.documents = r["documents"].as<int64_t>();
  s.seed = r["seed"].as<uint64_t>();
  const int64_t n = joule::data::write_synthetic_corpus(required(r, "out"), s);
  std::cout << "wrote " << r["out"].as<std::string>() << ": " << s.documents << " documents, " << n << " sentences\n";
  return 0;
}

int cmd_data_vocab(int argc, char** argv) {
  cxxopts::Options o("joule data vocab", "build a WordPiece vocabulary from a corpus");
  o.add_options()("input", "text file(s)", cxxopts::value<std::vector<std::string>>())(
      "out", "vocab.txt to write", cxxopts::value<std::string>())("size", "vocabulary size, special tokens included",
                                                                  cxxopts::value<int64_t>()->default_value("8000"))(
      "min-frequency", "least count of a merged piece", cxxopts::value<int64_t>()->default_value("2"))(
      "lower-case", "lower-case and strip accents", cxxopts::value<bool>()->default_value("true"))(
      "no-lower-case", "keep case and accents");
  auto r = parse(o, argc, argv);
  if (!r.count("input")) throw UsageError("missing required option --input");
  joule::data::VocabBuildOptions v;
  v.inputs = r["input"].as<std::vector<std::string>>();
  v.size = r["size"].as<int64_t>();
  v.min_frequency = r["min-frequency"].as<int64_t>();
  v.lower_case = r["lower-case"].as<bool>() && !r.count("no-lower-case");
  const std::string out = required(r, "out");
  const auto vocab = joule::data::build_vocab(v);
  vocab.save(out);
  std::cout << "wrote " << out << ": " << vocab.size() << " tokens\n";
  return 0;
}

// "2GB", "512MB", "1.5G", "800M", "4096" (bytes): binary units, as free(1) and Slurm's --mem.
int64_t parse_size(const std::string& flag, const std::string& text) {
  size_t used = 0;
  double value = -1;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
  }
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
  return static_cast<int64_t>(value * scale);
}

int cmd_data_create(int argc, char** argv) {
  cxxopts::Options o("joule data create", "raw text + vocab.txt -> pretraining shards, streamed in bounded memory");
  o.add_options()(
      "input",
      "text: files, directories, glob patterns or @LIST files; plain or .gz; one sentence per line, a blank line "
      "between documents (repeatable)",
      cxxopts::value<std::vector<std::string>>())("vocab", "vocab.txt", cxxopts::value<std::string>())(
      "out", "output directory", cxxopts::value<std::string>())(
      "phase", "NVIDIA's phase presets: 1 = --seq-len 128 --max-pred 20, 2 = --seq-len 512 --max-pred 80",
      cxxopts::value<int>())("seq-len", "tokens per sequence (default 128)", cxxopts::value<int>())(
      "max-pred", "masked positions per sequence (default 20)", cxxopts::value<int>())(
      "dupe-factor", "times each document is used with different masks", cxxopts::value<int>()->default_value("5"))(
      "shards", "training shards: the input cut into this many equal parts (plain-text input)",
      cxxopts::value<int>()->default_value("0"))("shard-mb", "input MB per training shard (instead of --shards)",
                                                 cxxopts::value<double>()->default_value("0"))(
      "memory-budget", "peak memory to stay under (chunks are sized to it)",
      cxxopts::value<std::string>()->default_value("2GB"))("seed", "seed",
                                                           cxxopts::value<uint64_t>()->default_value("12345"))(
      "lower-case", "lower-case and strip accents", cxxopts::value<bool>()->default_value("true"))(
      "no-lower-case", "keep case and accents")("whole-word-mask", "mask whole words")(
      "masked-lm-prob", "fraction of tokens masked", cxxopts::value<double>()->default_value("0.15"))(
      "short-seq-prob", "probability of a shorter target length", cxxopts::value<double>()->default_value("0.1"))(
      "eval-documents", "documents of the first chunk held out for an eval shard",
      cxxopts::value<int64_t>()->default_value("0"))("threads",
                                                     "worker threads (0: all cores); the output does not depend on it",
                                                     cxxopts::value<int>()->default_value("0"))(
      "skip-bad-input",
      "skip and count invalid UTF-8 lines, over-long lines or documents and empty files instead of stopping")(
      "replace", "replace an --out holding another data set (built in OUT.partial, swapped in when complete)");
  auto r = parse(o, argc, argv);
  if (!r.count("input")) throw UsageError("missing required option --input");
  joule::data::CreateOptions c;
  c.inputs = r["input"].as<std::vector<std::string>>();
  c.vocab = required(r, "vocab");
  c.out = required(r, "out");
  if (r.count("phase")) {
    const int phase = r["phase"].as<int>();
    if (phase != 1 && phase != 2)
      throw UsageError("--phase " + std::to_string(phase) + ": expected 1 (seq 128) or 2 (seq 512)");
    if (r.count("seq-len") || r.count("max-pred"))
      throw UsageError("--phase sets --seq-len and --max-pred: give one or the other");
    c.seq_len = phase == 1 ? 128 : 512;
    c.max_predictions = phase == 1 ? 20 : 80;
  }
  if (r.count("seq-len")) c.seq_len = r["seq-len"].as<int>();
  if (r.count("max-pred")) c.max_predictions = r["max-pred"].as<int>();
  c.dupe_factor = r["dupe-factor"].as<int>();
  c.shards = r["shards"].as<int>();
  c.shard_mb = r["shard-mb"].as<double>();
  if (c.shards > 0 && c.shard_mb > 0) throw UsageError("give --shards or --shard-mb, not both");
  c.memory_budget = parse_size("memory-budget", r["memory-budget"].as<std::string>());
  c.seed = r["seed"].as<uint64_t>();
  c.lower_case = r["lower-case"].as<bool>() && !r.count("no-lower-case");
  c.whole_word_mask = r.count("whole-word-mask") > 0;
  c.masked_lm_prob = r["masked-lm-prob"].as<double>();
  c.short_seq_prob = r["short-seq-prob"].as<double>();
  c.eval_documents = r["eval-documents"].as<int64_t>();
  c.threads = r["threads"].as<int>();
  c.replace = r.count("replace") > 0;
  c.skip_bad_input = r.count("skip-bad-input") > 0;
  const auto s = joule::data::create_pretraining_data(c);
  if (s.already_complete)
    std::cout << c.out << " already holds this data set (same inputs and arguments): nothing to do\n";
  if (s.resumed_chunks > 0)
    std::cout << "resumed: kept " << s.resumed_chunks << " verified shard(s) from an earlier run\n";
  if (s.skipped > 0)
    std::cout << "skipped " << s.skipped << " bad input item(s) (--skip-bad-input), the first: " << s.first_skip
              << "\n";
  std::cout << "wrote " << c.out << ": " << s.train_sequences << " training sequences in " << s.train_shards.size()
            << " shard(s) from " << s.documents << " documents";
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
      "samples", "sequences to decode", cxxopts::value<int>()->default_value("3"))(
      "vocab", "vocab.txt (default: beside the data)", cxxopts::value<std::string>()->default_value(""));
  o.parse_positional({"data"});
  auto r = parse(o, argc, argv);
  std::cout << joule::tools::data_inspect(required(r, "data"), r["samples"].as<int>(), r["vocab"].as<std::string>());
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
int report_error(const std::string& cmd, const std::string& what, const std::string& hint, int exit_code) {
  const std::string prefix = joule::launch::rank_prefix();
  std::cerr << (prefix + "joule " + cmd + ": error: " + what + "\n" + prefix + "what to do: " + hint + "\n")
            << std::flush;
  joule::launch::abort_job_if_distributed(exit_code);
  return exit_code;
}

int main(int argc, char** argv) {
  // OpenMP and OpenBLAS read their wait policies only when they load: set them and start over once. The `data`
  // commands run no LibTorch or BLAS work, and a second start (loading LibTorch again) would double their start-up.
  const bool uses_libtorch_threads = !(argc > 1 && std::strcmp(argv[1], "data") == 0);
  if (uses_libtorch_threads && joule::launch::set_runtime_environment()) execv("/proc/self/exe", argv);
  joule::launch::tune_allocator();
  joule::launch::install_caching_cpu_allocator();

  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    std::cout << kUsage;
    return args.empty() ? 2 : 0;
  }
  // Two-word commands ("model init") consume both words; cxxopts then sees the rest.
  const std::string cmd = args[0] + (args.size() > 1 && args[1].rfind("-", 0) != 0 ? " " + args[1] : "");
  try {
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
                              {"bench model", cmd_bench_model},
                              {"bench comm", cmd_bench_comm},
                              {"bench train", cmd_bench_train},
                              {"bench data", cmd_bench_data},
                              {"data synth", cmd_data_synth},
                              {"data vocab", cmd_data_vocab},
                              {"data create", cmd_data_create},
                              {"data inspect", cmd_data_inspect},
                              {"data tokenize", cmd_data_tokenize}};
    for (const Entry& e : commands) {
      const std::string name = e.name;
      const int words = name.find(' ') == std::string::npos ? 1 : 2;
      if (cmd == name || (words == 1 && args[0] == name)) return e.run(argc - words, argv + words);
    }
    std::cerr << "joule: unknown command '" << cmd << "'\n\n" << kUsage;
    return 2;
  } catch (const cxxopts::exceptions::exception& e) {
    std::cerr << "joule " << cmd << ": " << e.what() << " (see joule " << cmd << " --help)\n";
    return 2;
  } catch (const joule::Error& e) {
    return report_error(cmd, e.what(), e.hint(), e.exit_code());
  } catch (const std::exception& e) {
    // Not joule's own error type (LibTorch, the standard library): still one clear line on every rank.
    return report_error(cmd, e.what(),
                        "this error did not come with advice from joule; the message above names what failed", 1);
  }
}
