#include "tools/plan.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "collectives/alpha_beta.h"
#include "trainer/accounting.h"
#include "trainer/hardware.h"
#include "trainer/perf_model.h"

namespace joule::tools {
namespace fs = std::filesystem;
using trainer::ClusterModel;
using trainer::StepPrediction;
using trainer::Workload;
namespace {

std::string hardware_dir(const std::string& config_dir) { return (fs::path(config_dir) / "hardware").string(); }
std::string presets_dir(const std::string& config_dir) { return (fs::path(config_dir) / "models").string(); }

std::vector<std::string> instances_of(const PlanOptions& o, const std::string& config_dir) {
  if (!o.instances.empty()) return o.instances;
  std::vector<std::string> out;
  for (const auto& name : trainer::list_instance_profiles(hardware_dir(config_dir)))
    if (trainer::load_instance_profile(name, hardware_dir(config_dir)).device_kind != "cpu") out.push_back(name);
  return out;
}

Workload workload_of(const PlanOptions& o, const std::string& config_dir) {
  Workload w;
  w.model = models::load_config(o.model, presets_dir(config_dir));
  w.seq_len = o.seq_len;
  w.max_predictions = o.max_predictions > 0 ? o.max_predictions : trainer::default_max_predictions(o.seq_len);
  w.global_batch = o.global_batch;
  w.micro_batch = o.micro_batch;
  w.sequences = o.sequences;
  w.dtype = o.precision;
  if (w.seq_len < 1 || w.seq_len > w.model.max_position_embeddings)
    throw std::invalid_argument("--seq-len " + std::to_string(w.seq_len) + " is outside 1.." + std::to_string(w.model.max_position_embeddings));
  if (w.global_batch < 1 || w.micro_batch < 1 || !(w.sequences > 0)) throw std::invalid_argument("--global-batch, --micro-batch and --sequences must be positive");
  return w;
}

double grid_of(const PlanOptions& o, const std::string& config_dir) {
  if (o.grid_intensity > 0) return o.grid_intensity;
  return trainer::load_grid_region(o.region, (fs::path(config_dir) / "grid-intensity.toml").string()).g_per_kwh;
}

struct Planned {
  ClusterModel model;
  StepPrediction at_nodes;
  std::vector<StepPrediction> scaling;
};

struct Plan {
  Workload workload;
  double grid_g_per_kwh = 0;
  std::vector<Planned> instances;
};

Plan run_plan(const PlanOptions& o, const std::string& config_dir) {
  Plan plan{workload_of(o, config_dir), grid_of(o, config_dir), {}};
  for (const auto& name : instances_of(o, config_dir)) {
    ClusterModel m(trainer::load_instance_profile(name, hardware_dir(config_dir)), presets_dir(config_dir));
    Planned p{m, m.predict(plan.workload, o.nodes, {}, plan.grid_g_per_kwh), {}};
    for (int n : o.scaling) p.scaling.push_back(m.predict(plan.workload, n, {}, plan.grid_g_per_kwh));
    plan.instances.push_back(std::move(p));
  }
  return plan;
}

std::string f(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

}  // namespace

std::string plan_text(const PlanOptions& o, const std::string& config_dir) {
  const Plan plan = run_plan(o, config_dir);
  const auto& planned = plan.instances;
  const Workload& w = plan.workload;
  std::ostringstream out;
  out << "joule plan: " << o.model << ", seq " << o.seq_len << " (" << w.max_predictions << " predictions), global batch " << o.global_batch
      << ", micro-batch " << o.micro_batch << " per device, " << f("%.4g", o.sequences) << " sequences, " << o.precision << ", grid "
      << f("%.1f", plan.grid_g_per_kwh) << " g CO2/kWh\n\n";
  char line[512];
  std::snprintf(line, sizeof line, "%-16s %6s %8s %12s %13s %10s %11s %10s\n", "instance", "nodes", "hours", "seq/hour", "kWh", "USD", "CO2 kg", "seq/s");
  out << line;
  for (const auto& p : planned) {
    const StepPrediction& r = p.at_nodes;
    std::snprintf(line, sizeof line, "%-16s %6d %8.2f %12.4g %13.1f %10.0f %11.1f %10.0f\n", r.instance.c_str(), r.nodes, r.hours, r.seq_per_hour,
                  r.kwh, r.usd, r.co2_kg, r.seq_per_s);
    out << line;
  }
  out << "\nstep time breakdown at " << o.nodes << " nodes (seconds per step):\n";
  std::snprintf(line, sizeof line, "%-16s %9s %9s %11s %9s %9s %6s  %s\n", "instance", "step", "compute", "exposed comm", "comm", "other", "accum",
                "compute efficiency");
  out << line;
  for (const auto& p : planned) {
    const StepPrediction& r = p.at_nodes;
    std::snprintf(line, sizeof line, "%-16s %9.4f %9.4f %11.4f %9.4f %9.4f %6lld  %.3f, %s\n", r.instance.c_str(), r.step_s, r.compute_s,
                  r.exposed_comm_s, r.comm_s, r.optimizer_s, static_cast<long long>(r.accumulation), p.model.efficiency(),
                  p.model.efficiency_basis().c_str());
    out << line;
  }
  out << "\nscaling (seq/hour; hours for the target in brackets):\n";
  std::snprintf(line, sizeof line, "%-16s", "nodes");
  out << line;
  for (int n : o.scaling) out << f("%21.0f", n);
  out << "\n";
  for (const auto& p : planned) {
    std::snprintf(line, sizeof line, "%-16s", p.at_nodes.instance.c_str());
    out << line;
    for (const auto& r : p.scaling) {
      std::snprintf(line, sizeof line, "%11.3g (%6.1fh)", r.seq_per_hour, r.hours);
      out << line;
    }
    out << "\n";
  }
  out << "\nCompute-bound time from each profile's calibration; communication from the profile's links (α-β, hierarchical\n"
         "all-reduce of DDP's buckets, overlapped with the last backward); energy at device power by compute share.\n";
  return out.str();
}

std::string plan_json(const PlanOptions& o, const std::string& config_dir) {
  const auto planned = run_plan(o, config_dir).instances;
  auto row = [](const StepPrediction& r, const ClusterModel& m) {
    return nlohmann::json{{"instance", r.instance},
                          {"nodes", r.nodes},
                          {"devices", r.devices},
                          {"seq_per_s", r.seq_per_s},
                          {"seq_per_hour", r.seq_per_hour},
                          {"hours", r.hours},
                          {"kwh", r.kwh},
                          {"usd", r.usd},
                          {"co2_kg", r.co2_kg},
                          {"step_s", r.step_s},
                          {"compute_s", r.compute_s},
                          {"exposed_comm_s", r.exposed_comm_s},
                          {"comm_s", r.comm_s},
                          {"other_s", r.optimizer_s},
                          {"accumulation", r.accumulation},
                          {"node_power_w", r.node_power_w},
                          {"efficiency", m.efficiency()},
                          {"efficiency_basis", m.efficiency_basis()}};
  };
  nlohmann::json rows = nlohmann::json::array(), scaling = nlohmann::json::array();
  for (const auto& p : planned) {
    rows.push_back(row(p.at_nodes, p.model));
    for (const auto& r : p.scaling) scaling.push_back(row(r, p.model));
  }
  return nlohmann::json{{"rows", rows}, {"scaling", scaling}}.dump(2) + "\n";
}

std::vector<ValidationCase> validation_cases(const std::string& config_dir) {
  const std::string hw = hardware_dir(config_dir), presets = presets_dir(config_dir);
  const ClusterModel p4d(trainer::load_instance_profile("p4d.24xlarge", hw), presets);
  const ClusterModel trn1(trainer::load_instance_profile("trn1.32xlarge", hw), presets);
  const models::BertConfig large = models::load_config("bert-large", presets);
  std::vector<ValidationCase> cases;
  auto workload = [&](int64_t seq_len, int64_t global_batch, const std::string& dtype) {
    Workload w;
    w.model = large;
    w.seq_len = seq_len;
    w.max_predictions = trainer::default_max_predictions(seq_len);
    w.global_batch = global_batch;
    w.micro_batch = seq_len <= 128 ? 64 : 16;
    w.dtype = dtype;
    return w;
  };
  const std::string dle = "NVIDIA DeepLearningExamples BERT README (DGX A100 80 GB)";
  struct A100 {
    const char* what;
    int gpus;
    int64_t seq;
    const char* dtype;
    double published;
  };
  for (const A100& c : {A100{"8 x A100 AMP, phase 1", 8, 128, "bf16", 4591}, A100{"1 x A100 AMP, phase 1", 1, 128, "bf16", 580},
                        A100{"8 x A100 TF32, phase 1", 8, 128, "tf32", 2505}, A100{"1 x A100 TF32, phase 1", 1, 128, "tf32", 317},
                        A100{"8 x A100 AMP, phase 2", 8, 512, "bf16", 1657}, A100{"1 x A100 AMP, phase 2", 1, 512, "bf16", 210},
                        A100{"8 x A100 TF32, phase 2", 8, 512, "tf32", 860}, A100{"1 x A100 TF32, phase 2", 1, 512, "tf32", 110}}) {
    const int64_t per_gpu_batch = c.seq == 128 ? 8192 : 4096;  // NVIDIA's recipe per GPU (65,536 and 32,768 on 8)
    const double seq_per_s = p4d.predict(workload(c.seq, per_gpu_batch * c.gpus, c.dtype), 1, {}, 475, c.gpus).seq_per_s;
    const bool calibration = std::string(c.what) == "8 x A100 AMP, phase 1";
    cases.push_back({std::string("BERT-Large ") + c.what, "seq/s",
                     calibration ? "calibration (0 by construction)" : "independent: devices, dtype or sequence length", dle, c.published,
                     seq_per_s});
  }
  const std::string neuron = "AWS Neuron trn1 benchmarks (1 x trn1.32xlarge)";
  cases.push_back({"BERT-Large trn1.32xlarge LAMB GBS 65,536, phase 1", "seq/s", "calibration (0 by construction)", neuron, 3733,
                   trn1.predict(workload(128, 65536, "bf16"), 1).seq_per_s});
  cases.push_back({"BERT-Large trn1.32xlarge AdamW GBS 16,384, phase 1", "seq/s", "independent: global batch (optimizer not modelled apart)",
                   neuron, 3826.6, trn1.predict(workload(128, 16384, "bf16"), 1).seq_per_s});
  // NCCL all-reduce bus bandwidth, 1 GiB, on p4d nodes.
  const trainer::InstanceProfile& pp = p4d.profile();
  const double gib = 1024.0 * 1024 * 1024;
  const std::pair<int, double> nccl[] = {{1, 230.8}, {2, 57.2}, {3, 31.8}, {4, 29.6}};
  for (const auto& [nodes, published] : nccl) {
    const collectives::Topology t = trainer::cluster_topology(pp, nodes, pp.devices);
    const double seconds = collectives::hierarchical_all_reduce(t, gib).total_s();
    cases.push_back({"NCCL all-reduce busbw, 1 GiB, " + std::to_string(nodes) + " p4d node(s)", "GB/s",
                     nodes == 1 ? "calibration of intra_node_efficiency" : "independent: inter-node α-β", "NVIDIA/nccl issue 527 (p4dn, NCCL 2.9.9)",
                     published, collectives::all_reduce_bus_bandwidth(gib, seconds, nodes * pp.devices) / 1e9});
  }
  // The seed article: 16 x trn1.32xlarge against 16 x p4d.24xlarge, BERT-Large phase 1, 450M sequences.
  const Workload card = workload(128, 65536, "bf16");
  const StepPrediction t16 = trn1.predict(card, 16), p16 = p4d.predict(card, 16);
  const std::string article = "AWS ML blog (the seed article): 16 x trn1 vs 16 x p4d";
  cases.push_back({"trn1 / p4d sequences per hour, 16 nodes", "ratio", "independent", article, 1.7, t16.seq_per_hour / p16.seq_per_hour});
  cases.push_back({"trn1 / p4d energy for the run, 16 nodes", "ratio", "independent of any trn1 figure but its assumed power", article, 0.71,
                   t16.kwh / p16.kwh});
  cases.push_back({"trn1 / p4d cost for the run, 16 nodes", "ratio", "independent", article, 0.38, t16.usd / p16.usd});
  return cases;
}

std::string validation_table(const std::vector<ValidationCase>& cases) {
  std::ostringstream out;
  out << "| case | unit | published | predicted | error | basis | source |\n|---|---|---|---|---|---|---|\n";
  for (const auto& c : cases)
    out << "| " << c.name << " | " << c.unit << " | " << f("%.4g", c.published) << " | " << f("%.4g", c.predicted) << " | "
        << f("%+.1f %%", 100 * c.relative_error()) << " | " << c.basis << " | " << c.source << " |\n";
  return out.str();
}

}  // namespace joule::tools
