#include "tools/cli/engine_args.h"

#include <algorithm>
#include <exception>
#include <filesystem>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "launch/device_kind.h"
#include "tools/cli/flags.h"
#include "tools/config_dir.h"
#include "trainer/optimizer_options.h"

namespace joule::cli {

// ---- train, eval, export

namespace {

// The flags that name one run-config key each: `--steps 40` is `--set train.steps=40`.
const std::pair<const char*, const char*> kKeyFlags[] = {{"run-dir", "run.dir"},
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

void add_train_flags(cxxopts::Options& o) {
  add_path_flags(
      o, {{"config", "run config (TOML)", PathKind::input_file, "toml"},
          {"run-dir", "run directory (run.dir)", PathKind::output_dir},
          {"data", "training shards (data.train)", PathKind::input_path},
          {"eval-data", "held-out shards (data.eval)", PathKind::input_path},
          {"vocab", "vocab.txt (data.vocab)", PathKind::input_file, "vocab"},
          {"model", "preset, config.json or HF model directory (model.config)", PathKind::input_model, "json"}});
  o.add_options()("set", "override a key: table.key=value (repeatable; the value may hold commas)",
                  cxxopts::value<std::string>())("steps", "optimizer steps (train.steps)",
                                                 cxxopts::value<std::string>())(
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
}

}  // namespace

trainer::TrainRequest read_train(int argc, char** argv) {
  const std::vector<std::string> sets = take_flag_values(argc, argv, "set");
  cxxopts::Options o("joule train", "pretrain BERT; launch with mpirun -np N or srun --mpi=pmix");
  add_train_flags(o);
  std::vector<NumberFlag> numbers;  // the key flags of numeric keys, held to the keys' ranges
  for (const auto& [flag, key] : kKeyFlags)
    if (const auto range = trainer::RunConfig::key_range(key))
      numbers.push_back({flag, key, nullptr, range->first, range->second});
  declare_number_flags(o, numbers);
  auto r = parse(o, argc, argv);
  trainer::TrainRequest t;
  t.config = trainer::RunConfig::from_toml_file(required(r, "config"));
  for (const auto& [flag, key] : kKeyFlags)
    if (r.count(flag)) t.config.set(std::string(key) + "=" + r[flag].as<std::string>(), std::string("--") + flag);
  for (const std::string& a : sets) t.config.set(a);
  const bool eval_named = r.count("eval-data") > 0 || std::any_of(sets.begin(), sets.end(), [](const std::string& a) {
                            return a.rfind("data.eval=", 0) == 0;
                          });
  t.eval_from_data_root = r.count("data") > 0 && !eval_named;
  t.config.validate();
  t.resume = r["resume"].as<std::string>();
  t.accept_data_change = r.count("accept-data-change") > 0;
  t.presets_dir = tools::config_dir() + "/models";
  t.config_dir = tools::config_dir();
  return t;
}

EvalArgs read_eval(int argc, char** argv) {
  cxxopts::Options o("joule eval", "masked-LM and NSP accuracy of a model directory on shards");
  add_path_flags(o,
                 {{"model", "HF model directory", PathKind::input_dir},
                  {"data", "shards", PathKind::input_path},
                  {"dump", "also write the first batch, joule's logits on it and its losses to this safetensors file",
                   PathKind::output_file, "", "", ""}});
  o.add_options()("precision", "auto, fp32 or bf16 (auto: bf16 where the CPU has AVX512-BF16 or AMX-BF16)",
                  cxxopts::value<std::string>()->default_value("auto"))(
      "fp32-gemm", "auto, blas or onednn: the library fp32 GEMMs run on (as train.fp32_gemm)",
      cxxopts::value<std::string>()->default_value("auto"));
  const NumberFlag batch{"batch", "sequences per batch", "32", kBatch},
      max_batches{"max-batches", "batches to evaluate", "0", OptionRange{0, 1e12}, "0: all"};
  add_number_flags(o, {batch, max_batches});
  auto r = parse(o, argc, argv);
  EvalArgs a;
  a.precision = choice_flag<models::PrecisionSetting>(r, "precision", models::kPrecisionWords);
  a.fp32_gemm = choice_flag<launch::Fp32GemmSetting>(r, "fp32-gemm", launch::kFp32GemmWords);
  a.model = required(r, "model");
  a.data = required(r, "data");
  a.batch = int_flag(r, batch);
  a.max_batches = int_flag(r, max_batches);
  a.dump = r["dump"].as<std::string>();
  return a;
}

ExportArgs read_export(int argc, char** argv) {
  cxxopts::Options o("joule export", "a checkpoint (or a run directory's newest) as a HuggingFace model directory");
  add_path_flags(o, {{"checkpoint", "checkpoint or run directory", PathKind::input_dir},
                     {"out", "output HF model directory", PathKind::output_dir}});
  o.add_options()("replace", "replace an --out that holds a model (the new one is built beside it and swapped in)");
  auto r = parse(o, argc, argv);
  check_replacing(r, "out", "a model directory (config.json)");
  return {required(r, "checkpoint"), required(r, "out")};
}

void read_version(int argc, char** argv) {
  cxxopts::Options o("joule version", "joule's version and the libraries in use");
  parse(o, argc, argv);
}

// ---- model init, info, forward

ModelInitArgs read_model_init(int argc, char** argv) {
  cxxopts::Options o("joule model init", "write a freshly initialized HuggingFace model directory");
  add_path_flags(o, {{"config", "preset name, config.json or model directory", PathKind::input_model, "json"},
                     {"out", "output directory", PathKind::output_dir}});
  o.add_options()("dtype", "F32, F16 or BF16", cxxopts::value<std::string>()->default_value("F32"))(
      "replace", "replace an --out that holds a model (the new one is built beside it and swapped in)")(
      "architecture",
      "HuggingFace class (default BertForPreTraining; or BertForSequenceClassification, "
      "LayoutLMForTokenClassification, ...)",
      cxxopts::value<std::string>()->default_value(""));
  const NumberFlag seed{"seed", "initialization seed", "0", kSeeds};
  const NumberFlag labels{"labels", "a classifier's labels", "0", {0, 65536}, "0: the config's id2label, else 2"};
  add_number_flags(o, {seed, labels});
  auto r = parse(o, argc, argv);
  check_replacing(r, "out", "a model directory (config.json)");
  ModelInitArgs a;
  a.config = required(r, "config");
  a.seed = static_cast<uint64_t>(int_flag(r, seed));
  a.out = required(r, "out");
  a.dtype = r["dtype"].as<std::string>();
  a.architecture = r["architecture"].as<std::string>();
  a.labels = int_flag(r, labels);
  return a;
}

std::string read_model_info(int argc, char** argv) {
  cxxopts::Options o("joule model info", "parameter counts of a model config or directory");
  add_path_flags(o, {{"config", "preset name, config.json or model directory", PathKind::input_model, "json"},
                     {"dir", "model directory (also accepted positionally)", PathKind::input_dir}});
  o.parse_positional({"dir"});
  o.positional_help("[DIR]").show_positional_help();
  auto r = parse(o, argc, argv);
  if (r.count("config") == r.count("dir")) throw UsageError("give either a model directory or --config");
  return r.count("dir") ? r["dir"].as<std::string>() : r["config"].as<std::string>();
}

ModelForwardArgs read_model_forward(int argc, char** argv) {
  cxxopts::Options o("joule model forward",
                     "a BERT/LayoutLM model directory's logits (and hidden, pooled states) for the inputs of a "
                     "safetensors file");
  add_path_flags(o, {{"dir", "HuggingFace model directory (config.json, model.safetensors)", PathKind::input_dir},
                     {"inputs", "safetensors: input_ids, attention_mask [, token_type_ids, bbox] (I64 or I32)",
                      PathKind::input_file, "safetensors"},
                     {"out", "safetensors written: logits, hidden, pooled (F32)", PathKind::output_file}});
  o.add_options()("architecture", "HuggingFace class to run (default: config.json's)", cxxopts::value<std::string>())(
      "precision", "auto, fp32 or bf16", cxxopts::value<std::string>()->default_value("fp32"));
  const NumberFlag labels{
      "labels", "labels of a classification head (default: config.json's id2label, else 2)", "0", {0, 65536}};
  add_number_flags(o, {labels});
  auto r = parse(o, argc, argv);
  ModelForwardArgs a;
  a.dir = required(r, "dir");
  a.architecture = r.count("architecture") ? r["architecture"].as<std::string>() : "";
  a.labels = int_flag(r, labels);
  a.inputs = required(r, "inputs");
  a.out = required(r, "out");
  a.precision = choice_flag<models::PrecisionSetting>(r, "precision", models::kPrecisionWords);
  return a;
}

// ---- infer, serve: the flags of the commands that load a classifier directory, declared and read in one place

namespace {

const NumberFlag kMaxLength{"max-length",
                            "tokens per input (a line, an example) at most: longer ones are truncated",
                            "0",
                            {0, 65536},
                            "0: the model's positions, at most 512"};
const NumberFlag kForwardThreads{"threads", "intra-op threads", "0", kThreads, "0: every core"};

// --architecture, --precision, --max-length, --threads, --cased, --allow-untrained-head.
void add_classifier_flags(cxxopts::Options& o) {
  o.add_options()("architecture", "HuggingFace class to run (default: config.json's)", cxxopts::value<std::string>())(
      "precision", "auto, fp32 or bf16 (auto: bf16 where the CPU has bf16 matmul instructions)",
      cxxopts::value<std::string>()->default_value("auto"))(
      "allow-untrained-head", "run a classifier whose head or pooler the directory lacks (initialized at random)")(
      "cased", "keep case (default: tokenizer_config.json's do_lower_case, else lower-case)");
  add_number_flags(o, {kMaxLength, kForwardThreads});
}

// The ClassifierOptions those flags give for the directory `model_dir`.
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

// The model's name in the URLs: --name, else the directory's.
std::string model_name(const cxxopts::ParseResult& r, const std::string& dir) {
  std::string name =
      r.count("name") ? r["name"].as<std::string>() : std::filesystem::path(output_directory(dir)).filename().string();
  if (!std::regex_match(name, std::regex("[A-Za-z0-9_.-]{1,128}")) || name == "." || name == "..")
    throw UsageError("--name '" + name + "' cannot be a model's name in a URL",
                     "give --name 1 to 128 letters, digits, '_', '-' or '.'");
  return name;
}

}  // namespace

InferArgs read_infer(int argc, char** argv) {
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
  InferArgs a;
  static_cast<models::infer::ClassifierOptions&>(a.options) = classifier_options(r, required(r, "model"));
  a.options.input = required(r, "input");
  a.options.output = required(r, "output");
  a.options.batch = int_flag(r, batch);
  a.options.skip_bad_lines = r.count("skip-bad-lines") > 0;
  a.quiet = r.count("quiet") > 0;
  return a;
}

ServeArgs read_serve(int argc, char** argv) {
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
  ServeArgs a;
  a.classifier = classifier_options(r, required(r, "model"));
  a.server.host = r["host"].as<std::string>();
  a.server.port = static_cast<int>(int_flag(r, port));
  a.server.batcher.max_batch = int_flag(r, max_batch);
  a.delay_ms = int_flag(r, delay);
  a.server.batcher.max_delay_s = static_cast<double>(a.delay_ms) / 1e3;
  a.server.batcher.max_queue = int_flag(r, max_queue);
  if (a.server.batcher.max_queue < a.server.batcher.max_batch)
    throw UsageError("--max-queue " + std::to_string(a.server.batcher.max_queue) + " is below --max-batch " +
                     std::to_string(a.server.batcher.max_batch) + ": no full batch could ever wait");
  a.server.max_body_bytes = int_flag(r, max_body);
  a.server.http_threads = static_cast<int>(int_flag(r, http_threads));
  a.name = model_name(r, a.classifier.model_dir);
  a.instance = r["instance"].as<std::string>();
  a.check = r.count("check") > 0;
  return a;
}

// ---- bench infer, model, train, comm, data

// bench train's and bench comm's deadline for a wait on the other ranks (tools/bench_deadline.h).
const NumberFlag kCollectiveTimeoutFlag{
    "collective-timeout",
    "seconds a wait for the other ranks may take before the bench fails (train.collective_timeout_seconds)", "600",
    OptionRange{0, 1e7, true, false}};

InferBenchArgs read_bench_infer(int argc, char** argv) {
  cxxopts::Options o(
      "joule bench infer",
      "inference throughput and p50/p99 latency of a BERT/LayoutLM classifier per batch size, with energy "
      "and cost per million inferences");
  add_path_flags(
      o, {{"model", "preset (bert-base, bert-large, layoutlm-base) or model directory", PathKind::input_model, "json",
           "", "bert-base"},
          {"out",
           "also write the result as an inference run, DIR/inference.json (`joule summary DIR`, `joule report DIR`, "
           "`joule plan --inference --measured DIR`)",
           PathKind::output_dir},
          {"profile",
           "write the timed calls of the one batch size as a Chrome trace (tools/bench/op_profile.py --steps CALLS "
           "sums it per op)",
           PathKind::output_file, "", "", ""}});
  o.add_options()("architecture",
                  "HuggingFace class (default: the directory's; a preset: its sequence or token classifier)",
                  cxxopts::value<std::string>()->default_value(""))(
      "batches", "batch sizes, comma-separated", cxxopts::value<std::string>()->default_value("1,2,4,8,16"))(
      "precision", "auto, fp32 or bf16", cxxopts::value<std::string>()->default_value("auto"))(
      "instance", "instance profile for the price (configs/hardware)",
      cxxopts::value<std::string>()->default_value("cpu-host"))("json", "one JSON line instead of the table")(
      "region", "grid region for CO2", cxxopts::value<std::string>()->default_value("world"))(
      "replace", "replace an --out that holds an inference run");
  const NumberFlag seq_len{"seq-len", "tokens per sequence", "128", kSeqLen};
  const NumberFlag labels{"labels", "a classifier's labels", "0", {0, 65536}, "0: the directory's id2label, else 2"};
  const NumberFlag threads{"threads", "intra-op threads", "0", kThreads, "0: every core"};
  const NumberFlag seconds{"seconds", "timed seconds per batch size", "2", {0.01, 3600}};
  const NumberFlag p99{"p99-ms", "latency bound: the best throughput whose p99 meets it", "0", {0, 1e6}, "0: none"};
  add_number_flags(o, {seq_len, labels, threads, seconds, p99});
  auto r = parse(o, argc, argv);
  check_replacing(r, "out", "an inference run (inference.json)");
  InferBenchArgs a;
  tools::InferBenchOptions& io = a.options;
  io.model = r["model"].as<std::string>();
  io.architecture = r["architecture"].as<std::string>();
  io.precision = choice_flag<models::PrecisionSetting>(r, "precision", models::kPrecisionWords);
  io.instance = r["instance"].as<std::string>();
  io.region = r["region"].as<std::string>();
  io.seq_len = int_flag(r, seq_len);
  io.labels = int_flag(r, labels);
  io.threads = thread_flag(r, threads);
  io.seconds = number_flag(r, seconds);
  io.p99_ms = number_flag(r, p99);
  io.profile = r["profile"].as<std::string>();
  io.batches.clear();
  for (const std::string& item : split_commas(r["batches"].as<std::string>())) {
    size_t end = 0;
    long long b = -1;
    try {
      b = std::stoll(item, &end);
    } catch (const std::exception&) {
    }
    if (end != item.size() || b < 1) throw UsageError("--batches: '" + item + "' is not a positive batch size");
    io.batches.push_back(b);
  }
  if (r.count("out")) a.out = required(r, "out");
  a.json = r.count("json") > 0;
  return a;
}

ModelBenchArgs read_bench_model(int argc, char** argv) {
  cxxopts::Options o("joule bench model", "forward+backward throughput against this CPU's sgemm rate");
  add_path_flags(
      o, {{"config", "preset name, config.json or model directory", PathKind::input_model, "json", "", "bert-base"}});
  o.add_options()("precision", "auto, fp32 or bf16 (auto: bf16 where the CPU has AVX512-BF16 or AMX-BF16)",
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
  ModelBenchArgs a;
  tools::ModelBenchOptions& b = a.options;
  a.config = r["config"].as<std::string>();
  b.seq_len = int_flag(r, seq_len);
  b.batch = int_flag(r, batch);
  b.max_predictions = int_flag(r, max_pred);
  b.threads = thread_flag(r, threads);
  b.iterations = static_cast<int>(int_flag(r, iterations));
  b.warmup = static_cast<int>(int_flag(r, warmup));
  b.precision = choice_flag<models::PrecisionSetting>(r, "precision", models::kPrecisionWords);
  b.fp32_gemm = choice_flag<launch::Fp32GemmSetting>(r, "fp32-gemm", launch::kFp32GemmWords);
  a.json = r.count("json") > 0;
  return a;
}

tools::TrainBenchOptions read_bench_train(int argc, char** argv) {
  cxxopts::Options o(
      "joule bench train",
      "the whole training step (dropout, bucketed all-reduce, LAMB) on synthetic batches; run under mpirun");
  add_path_flags(
      o, {{"config", "model preset, config.json or model directory", PathKind::input_model, "json", "", "bert-base"},
          {"profile", "write rank 0's timed steps as a Chrome trace (tools/bench/op_profile.py sums it per op)",
           PathKind::output_file, "", "", ""}});
  o.add_options()("precision", "auto, fp32 or bf16 (auto: bf16 where the CPU has AVX512-BF16 or AMX-BF16)",
                  cxxopts::value<std::string>()->default_value("auto"))(
      "wire", "all-reduce buffer dtype: fp32 or bf16 (gradients stay fp32; bf16 halves the bytes sent)",
      cxxopts::value<std::string>()->default_value("fp32"))("device", "cpu or cuda (one GPU per rank)",
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
           OptionRange{0, 1e6}, "0: none"},
      timeout = kCollectiveTimeoutFlag;
  add_number_flags(o, {seq_len, micro_batch, max_pred, threads, warmup, steps, peak, timeout});
  auto r = parse(o, argc, argv);
  tools::TrainBenchOptions b;
  // cpu and cuda only (trainium-sim is a run's simulated cluster): DeviceKind's first two words.
  b.device = choice_flag<launch::DeviceKind>(r, "device", {"cpu", "cuda"});
  b.peak_tflops = number_flag(r, peak);
  b.collective_timeout_seconds = number_flag(r, timeout);
  b.profile = r["profile"].as<std::string>();
  b.model_name = r["config"].as<std::string>();
  b.seq_len = int_flag(r, seq_len);
  b.micro_batch = int_flag(r, micro_batch);
  b.max_predictions = int_flag(r, max_pred);
  b.threads = thread_flag(r, threads);
  b.warmup = static_cast<int>(int_flag(r, warmup));
  b.steps = static_cast<int>(int_flag(r, steps));
  b.precision = choice_flag<models::PrecisionSetting>(r, "precision", models::kPrecisionWords);
  b.wire = r["wire"].as<std::string>();
  b.fp32_gemm = choice_flag<launch::Fp32GemmSetting>(r, "fp32-gemm", launch::kFp32GemmWords);
  b.shard = choice_flag<trainer::OptimizerSharding>(r, "shard", trainer::kExplicitShardingWords);
  return b;
}

tools::CommBenchOptions read_bench_comm(int argc, char** argv) {
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
      min_busbw{"min-busbw", "fail below this busbw (GB/s) at the largest size", "0", OptionRange{0, 1e6}, "0: none"},
      timeout = kCollectiveTimeoutFlag;
  add_number_flags(o, {min_bytes, max_bytes, iterations, alpha, mbps, overlap_batch, min_busbw, timeout});
  auto r = parse(o, argc, argv);
  tools::CommBenchOptions b;
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
  b.collective_timeout_seconds = number_flag(r, timeout);
  return b;
}

tools::BenchDataOptions read_bench_data(int argc, char** argv) {
  cxxopts::Options o("joule bench data", "sequences/s the loader delivers to one rank under the global shuffle");
  add_path_flags(o, {{"data", "shard directory, glob, list file or shard", PathKind::input_path}});
  o.add_options()("json", "print one JSON object");
  const NumberFlag micro_batch{"micro-batch", "sequences per batch", "32", kBatch},
      global_batch{"global-batch", "sequences per optimizer step, all ranks", "0", OptionRange{0, 1e9},
                   "0: micro-batch x world size"},
      world_size{"world-size", "ranks the steps are split over", "1", OptionRange{1, 1e6}},
      rank{"rank", "the rank whose part is read", "0", OptionRange{0, 1e6}},
      batches{"batches", "timed batches", "200", kRepeats}, warmup{"warmup", "untimed batches first", "10", kWarmup};
  add_number_flags(o, {micro_batch, global_batch, world_size, rank, batches, warmup});
  auto r = parse(o, argc, argv);
  tools::BenchDataOptions b;
  b.data = required(r, "data");
  b.micro_batch = int_flag(r, micro_batch);
  b.global_batch = int_flag(r, global_batch);
  b.world_size = static_cast<int>(int_flag(r, world_size));
  b.rank = static_cast<int>(int_flag(r, rank));
  b.batches = static_cast<int>(int_flag(r, batches));
  b.warmup = static_cast<int>(int_flag(r, warmup));
  b.json = r.count("json") > 0;
  return b;
}

}  // namespace joule::cli
