// `joule train`, `joule eval` and `joule export`: a run, a model's accuracy, a checkpoint as a model directory.
#include <algorithm>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include "launch/cpu_isa.h"
#include "launch/runtime.h"
#include "models/precision.h"
#include "tools/cli/command.h"
#include "tools/cli/engine.h"
#include "tools/cli/flags.h"
#include "tools/model_commands.h"
#include "trainer/trainer.h"

namespace joule::cli {
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

int train(int argc, char** argv) {
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
  return trainer::train(t);
}

int eval(int argc, char** argv) {
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
  const auto precision = models::choose_precision(
      choice_flag<models::PrecisionSetting>(r, "precision", models::kPrecisionWords), false, launch::CpuIsa::current());
  const launch::GemmPath gemm =
      launch::choose_gemm_path(choice_flag<launch::Fp32GemmSetting>(r, "fp32-gemm", launch::kFp32GemmWords));
  const std::string result = trainer::evaluate_model_dir(required(r, "model"), required(r, "data"), int_flag(r, batch),
                                                         int_flag(r, max_batches), precision.precision,
                                                         r["dump"].as<std::string>(), gemm.choice.fp32)
                                 .to_json()
                                 .dump();
  // After the evaluation: an error is not preceded by them.
  std::cerr << "joule eval: " << precision.reason << "\ngemm: " << gemm.line() << "\n";
  std::cout << result << "\n";
  return 0;
}

int export_checkpoint(int argc, char** argv) {
  cxxopts::Options o("joule export", "a checkpoint (or a run directory's newest) as a HuggingFace model directory");
  add_path_flags(o, {{"checkpoint", "checkpoint or run directory", PathKind::input_dir},
                     {"out", "output HF model directory", PathKind::output_dir}});
  o.add_options()("replace", "replace an --out that holds a model (the new one is built beside it and swapped in)");
  auto r = parse(o, argc, argv);
  check_replacing(r, "out", "a model directory (config.json)");
  const std::string used = trainer::export_checkpoint(required(r, "checkpoint"), required(r, "out"));
  std::cout << "exported " << used << " to " << r["out"].as<std::string>() << "\n";
  return 0;
}

}  // namespace joule::cli
