// `joule plan` in its two modes, one handler each: a training run's hours, energy and cost on N instances of each
// accelerator profile (`plan`), and an inference fleet's size and cost for a rate (`plan --inference`). Each mode's
// flags are refused in the other, never silently ignored.
#include <filesystem>
#include <iostream>
#include <string>
#include <tuple>
#include <vector>

#include "tools/cli/command.h"
#include "tools/cli/flags.h"
#include "tools/config_dir.h"
#include "tools/plan.h"
#include "tools/plan_inference.h"
#include "trainer/sim/validation.h"

namespace joule::cli {
namespace {

// Flags both modes take: the model, the instances, where the energy comes from, and how to print.
void add_shared_flags(cxxopts::Options& o, const char* model_default) {
  add_path_flags(o, {{"model", "model preset or config.json", PathKind::input_model, "json", "", model_default}});
  o.add_options()("instance",
                  "instance profile, or PROFILE:PRECISION for that row (repeatable, or comma-separated; default: every "
                  "accelerator profile at --precision)",
                  cxxopts::value<std::string>())("region", "grid region for CO2",
                                                 cxxopts::value<std::string>()->default_value("world"))(
      "json", "print JSON instead of the table")(
      "validate", "print the model's validation against published figures (VALIDATION.md's table)")(
      "inference",
      "size an inference fleet instead: per inference instance profile (configs/hardware/inference; --instance "
      "picks) the throughput within --p99-ms, instances for --rate with --headroom, USD/kWh/CO2 per million "
      "(--model defaults to layoutlm-base; with --validate: the inference validation table; joule plan --inference "
      "--help lists its flags)");
}

const NumberFlag kGrid{"grid-intensity", "g CO2 per kWh (overrides --region)", "0", OptionRange{0, 5000},
                       "0: the region's"};
const NumberFlag kSeqLenFlag{"seq-len", "sequence length", "128", kSeqLen};

// "p4d.24xlarge,p5.48xlarge" is two profiles; a profile file whose path holds a comma is one.
std::vector<std::string> instance_list(const std::vector<std::string>& values) {
  std::vector<std::string> instances;
  for (const std::string& v : values) {
    std::error_code ec;
    if (std::filesystem::exists(v, ec) || std::filesystem::exists(v.substr(0, v.rfind(':')), ec)) {
      instances.push_back(v);
      continue;
    }
    for (const std::string& item : split_commas(v)) instances.push_back(item);
  }
  return instances;
}

}  // namespace

int plan(int argc, char** argv) {
  if (has_flag(argc, argv, "inference")) return plan_inference(argc, argv);
  refuse_flags(argc, argv, {"rate", "measured", "csv", "seq", "p99-ms", "headroom"},
               "sizes an inference fleet: add --inference");
  const std::vector<std::string> instance_args = take_flag_values(argc, argv, "instance");  // a path may hold a comma
  cxxopts::Options o("joule plan",
                     "predict hours, seq/hour, kWh, USD and CO2 of a workload on N instances of each profile");
  add_shared_flags(o, "bert-large");
  o.add_options()("precision", "compute dtype: bf16, fp16, tf32, fp32",
                  cxxopts::value<std::string>()->default_value("bf16"))(
      "shard",
      "none or zero1: LAMB's state whole on every device, or split over them (reduce-scatter + all-gather instead of "
      "the all-reduce; optimizer.shard)",
      cxxopts::value<std::string>()->default_value("none"))(
      "scaling", "node counts for the scaling curve", cxxopts::value<std::string>()->default_value("1,2,4,8,16,32,64"))(
      "study",
      "print the seed study's comparison beside the model's (its own workload: BERT-Large phase 1, 450M sequences, "
      "16 x trn1.32xlarge vs 16 x p4d.24xlarge; the other flags do not apply)");
  const NumberFlag max_pred{"max-predictions", "masked positions per sequence", "0", kPredictions,
                            "0: 20 at 128, 80 at 512"},
      global_batch{"global-batch", "sequences per optimizer step", "65536", OptionRange{1, 1 << 30}},
      micro_batch{"micro-batch", "sequences per device per forward/backward", "32", kBatch},
      sequences{"sequences", "sequences to train on", "450e6", OptionRange{1, 1e15}},
      nodes{"nodes", "instances", "16", kNodes},
      padded{"padded-efficiency", "real tokens of the padded rows' tokens (with --packed-efficiency: packed rows too)",
             "0", OptionRange{0, 1}, "0: no packed rows"},
      packed{"packed-efficiency", "real tokens of the packed rows' tokens", "0", OptionRange{0, 1},
             "0: no packed rows"};
  add_number_flags(o, {kSeqLenFlag, max_pred, global_batch, micro_batch, sequences, nodes, kGrid, padded, packed});
  add_path_flags(o, {{"packing",
                      "a packed data set (`joule data pack`, `data create --pack`): its metadata's efficiencies, "
                      "padded and packed, add a packed row to each instance",
                      PathKind::input_path, "", "", ""}});
  auto r = parse(o, argc, argv);
  const std::string configs = tools::config_dir();
  if (r.count("validate")) {
    std::cout << sim::validation_table(sim::validation_cases(configs));
    return 0;
  }
  if (r.count("study")) {
    std::cout << sim::study_text(sim::study_comparison(configs));
    return 0;
  }
  tools::PlanOptions p;
  p.model = r["model"].as<std::string>();
  p.seq_len = int_flag(r, kSeqLenFlag);
  p.max_predictions = int_flag(r, max_pred);
  p.global_batch = int_flag(r, global_batch);
  p.micro_batch = int_flag(r, micro_batch);
  p.sequences = number_flag(r, sequences);
  p.precision = r["precision"].as<std::string>();
  p.shard = choice_flag<trainer::OptimizerSharding>(r, "shard", trainer::kExplicitShardingWords);
  p.nodes = static_cast<int>(int_flag(r, nodes));
  p.instances = instance_list(instance_args);
  p.region = r["region"].as<std::string>();
  p.grid_intensity = number_flag(r, kGrid);
  p.padded_efficiency = number_flag(r, padded);
  p.packed_efficiency = number_flag(r, packed);
  if (!r["packing"].as<std::string>().empty()) {
    if (r.count("padded-efficiency") || r.count("packed-efficiency"))
      throw UsageError("--packing reads both efficiencies: give it or --padded-efficiency and --packed-efficiency");
    std::tie(p.padded_efficiency, p.packed_efficiency) = tools::packing_of(r["packing"].as<std::string>());
  }
  p.scaling.clear();
  for (const std::string& item : split_commas(r["scaling"].as<std::string>()))
    p.scaling.push_back(static_cast<int>(checked_int(item, "--scaling: node count", kNodes)));
  if (p.scaling.empty()) throw UsageError("--scaling is empty: give node counts such as 1,2,4,8");
  std::cout << (r.count("json") ? tools::plan_json(p, configs) : tools::plan_text(p, configs));
  return 0;
}

int plan_inference(int argc, char** argv) {
  refuse_flags(argc, argv,
               {"precision", "shard", "scaling", "nodes", "global-batch", "micro-batch", "sequences", "max-predictions",
                "study", "packing", "padded-efficiency", "packed-efficiency"},
               "plans training; --inference sizes an inference fleet (see joule plan --help)");
  const std::vector<std::string> instance_args = take_flag_values(argc, argv, "instance");
  cxxopts::Options o("joule plan --inference",
                     "size an inference fleet: instances, USD, kWh and CO2 per million inferences for a rate");
  add_shared_flags(o, "layoutlm-base");
  o.add_options()("rate", "inferences with a unit: 1000000/h, 278/s, 16667/min",
                  cxxopts::value<std::string>()->default_value("1000000/h"))(
      "measured",
      "`joule bench infer --json` outputs or inference runs (`--out DIR`), comma-separated: FILE adds this host's "
      "row, PROFILE=FILE a measurement taken on that instance",
      cxxopts::value<std::string>())("csv", "print the rows as CSV");
  const NumberFlag seq{"seq", "tokens per inference, as --seq-len", nullptr, kSeqLen},
      p99{"p99-ms", "latency bound of one batch call, milliseconds", "0", OptionRange{0, 1e6}, "0: none"},
      headroom{"headroom", "spare capacity over the rate", "0.2", OptionRange{0, 10}};
  add_number_flags(o, {kSeqLenFlag, seq, p99, headroom, kGrid});
  auto r = parse(o, argc, argv);
  const std::string configs = tools::config_dir();
  if (r.count("json") && r.count("csv")) throw UsageError("--json and --csv: choose one");
  if (r.count("seq") && r.count("seq-len") && int_flag(r, seq) != int_flag(r, kSeqLenFlag))
    throw UsageError("--seq and --seq-len disagree: give one");
  if (r.count("validate")) {
    std::cout << sim::validation_table(sim::inference_validation_cases(configs));
    return 0;
  }
  tools::InferencePlanOptions p;
  p.model = r["model"].as<std::string>();
  p.seq_len = r.count("seq") ? int_flag(r, seq) : int_flag(r, kSeqLenFlag);
  p.rate_per_hour = tools::parse_rate_per_hour(r["rate"].as<std::string>());
  p.p99_ms = number_flag(r, p99);
  p.headroom = number_flag(r, headroom);
  p.instances = instance_list(instance_args);
  if (r.count("measured")) {
    const std::string list = r["measured"].as<std::string>();
    p.measured = split_commas(list);
    if (list.empty() || list.back() == ',') p.measured.push_back("");  // refused, naming the flag
  }
  p.region = r["region"].as<std::string>();
  p.grid_intensity = number_flag(r, kGrid);
  std::cout << (r.count("json")  ? tools::inference_plan_json(p, configs)
                : r.count("csv") ? tools::inference_plan_csv(p, configs)
                                 : tools::inference_plan_text(p, configs));
  return 0;
}

}  // namespace joule::cli
