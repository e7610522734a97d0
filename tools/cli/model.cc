// `joule model init|info|forward`: HuggingFace model directories made, counted and run.
#include <cstdint>
#include <iostream>
#include <string>

#include "tools/cli/command.h"
#include "tools/cli/engine.h"
#include "tools/cli/flags.h"
#include "tools/model_commands.h"

namespace joule::cli {

int model_init(int argc, char** argv) {
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
  std::cout << tools::model_init(required(r, "config"), static_cast<uint64_t>(int_flag(r, seed)), required(r, "out"),
                                 r["dtype"].as<std::string>(), r["architecture"].as<std::string>(), int_flag(r, labels))
            << "\n";
  return 0;
}

int model_info(int argc, char** argv) {
  cxxopts::Options o("joule model info", "parameter counts of a model config or directory");
  add_path_flags(o, {{"config", "preset name, config.json or model directory", PathKind::input_model, "json"},
                     {"dir", "model directory (also accepted positionally)", PathKind::input_dir}});
  o.parse_positional({"dir"});
  o.positional_help("[DIR]").show_positional_help();
  auto r = parse(o, argc, argv);
  if (r.count("config") == r.count("dir")) throw UsageError("give either a model directory or --config");
  std::cout << tools::model_info(r.count("dir") ? r["dir"].as<std::string>() : r["config"].as<std::string>());
  return 0;
}

int model_forward(int argc, char** argv) {
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
  std::cout << tools::model_forward(required(r, "dir"),
                                    r.count("architecture") ? r["architecture"].as<std::string>() : "",
                                    int_flag(r, labels), required(r, "inputs"), required(r, "out"),
                                    choice_flag<models::PrecisionSetting>(r, "precision", models::kPrecisionWords))
            << std::flush;
  return 0;
}

}  // namespace joule::cli
