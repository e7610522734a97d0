#include "tools/plan.h"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <stdexcept>

#include <nlohmann/json.hpp>

#include "launch/util/error.h"
#include "launch/util/file_io.h"
#include "launch/util/format.h"
#include "launch/util/json_field.h"
#include "trainer/cost/accounting.h"
#include "trainer/cost/hardware.h"
#include "trainer/sim/alpha_beta.h"
#include "trainer/sim/perf_model.h"

namespace joule::tools {
namespace fs = std::filesystem;
using sim::ClusterModel;
using sim::StepPrediction;
using sim::Workload;
namespace {

std::string hardware_dir(const std::string& config_dir) { return (fs::path(config_dir) / "hardware").string(); }
std::string presets_dir(const std::string& config_dir) { return (fs::path(config_dir) / "models").string(); }

const char* const kPrecisions[] = {"bf16", "fp16", "tf32", "fp32"};

std::string checked_precision(const std::string& precision, const std::string& where) {
  for (const char* p : kPrecisions)
    if (precision == p) return precision;
  throw joule::UsageError(where + ": precision '" + precision + "' is unknown; valid: bf16, fp16, tf32, fp32");
}

// An instance of the table and the precision its row assumes.
struct InstanceRow {
  std::string name, precision;
};

// --instance NAME or NAME:PRECISION (per row); none: every accelerator profile at --precision.
std::vector<InstanceRow> instances_of(const PlanOptions& o, const std::string& config_dir) {
  std::vector<InstanceRow> out;
  for (const std::string& spec : o.instances) {
    const size_t colon = spec.find(':');
    if (colon == std::string::npos)
      out.push_back({spec, o.precision});
    else
      out.push_back({spec.substr(0, colon), checked_precision(spec.substr(colon + 1), "--instance " + spec)});
  }
  if (!out.empty()) return out;
  for (const auto& name : cost::list_instance_profiles(hardware_dir(config_dir)))
    if (cost::load_instance_profile(name, hardware_dir(config_dir)).device_kind != "cpu")
      out.push_back({name, o.precision});
  return out;
}

Workload workload_of(const PlanOptions& o, const std::string& config_dir) {
  Workload w;
  w.model = models::load_config(o.model, presets_dir(config_dir));
  w.seq_len = o.seq_len;
  w.max_predictions = o.max_predictions > 0 ? o.max_predictions : sim::default_max_predictions(o.seq_len);
  w.global_batch = o.global_batch;
  w.micro_batch = o.micro_batch;
  w.sequences = o.sequences;
  w.dtype = checked_precision(o.precision, "--precision");
  if (w.seq_len < 1 || w.seq_len > w.model.max_position_embeddings)
    throw joule::UsageError("--seq-len " + std::to_string(w.seq_len) + " is outside 1.." +
                            std::to_string(w.model.max_position_embeddings));
  if (w.global_batch < 1 || w.micro_batch < 1 || !(w.sequences > 0))
    throw joule::UsageError("--global-batch, --micro-batch and --sequences must be positive");
  if (w.max_predictions > w.seq_len)
    throw joule::UsageError("--max-predictions " + std::to_string(w.max_predictions) + " is more than --seq-len " +
                            std::to_string(w.seq_len));
  return w;
}

double grid_of(const PlanOptions& o, const std::string& config_dir) {
  if (o.grid_intensity > 0) return o.grid_intensity;
  return cost::load_grid_region(o.region, (fs::path(config_dir) / "grid-intensity.toml").string()).g_per_kwh;
}

struct Planned {
  std::string precision;
  double sequences_per_row = 1;  // > 1: packed rows
  ClusterModel model;
  StepPrediction at_nodes;
  std::vector<StepPrediction> scaling;
};

struct Plan {
  Workload workload;
  double grid_g_per_kwh = 0;
  std::vector<Planned> instances;
};

// "padded" or "packed 2.02/row": what a row of the table trains on.
std::string layout_label(const Planned& p) {
  return p.sequences_per_row > 1 ? format_number("packed %.2f/row", p.sequences_per_row) : "padded";
}

// The instance, and "packed" after it on a packed row: the name of a row in the tables below the first.
std::string row_name(const Planned& p) { return p.at_nodes.instance + (p.sequences_per_row > 1 ? " packed" : ""); }

Plan run_plan(const PlanOptions& o, const std::string& config_dir) {
  if ((o.padded_efficiency > 0) != (o.packed_efficiency > 0) || o.padded_efficiency > 1 || o.packed_efficiency > 1)
    throw joule::UsageError("packing needs both efficiencies in (0, 1]: the padded data's and the packed data's",
                            "give --packing DIR (a packed data set) or --padded-efficiency and --packed-efficiency");
  if (o.packed_efficiency > 0 && o.packed_efficiency < o.padded_efficiency)
    throw joule::UsageError("--packed-efficiency " + format_number("%g", o.packed_efficiency) +
                            " is below --padded-efficiency " + format_number("%g", o.padded_efficiency) +
                            ": packing only removes padding");
  Plan plan{workload_of(o, config_dir), grid_of(o, config_dir), {}};
  for (const InstanceRow& row : instances_of(o, config_dir)) {
    ClusterModel m(cost::load_instance_profile(row.name, hardware_dir(config_dir)), presets_dir(config_dir));
    Workload w = plan.workload;
    w.dtype = row.precision;
    w.zero1 = o.shard == trainer::OptimizerSharding::zero1;
    std::vector<double> layouts = {1.0};
    if (o.packed_efficiency > 0) layouts.push_back(o.packed_efficiency / o.padded_efficiency);
    for (const double per_row : layouts) {
      w.sequences_per_row = per_row;
      Planned p{row.precision, per_row, m, m.predict(w, o.nodes, plan.grid_g_per_kwh), {}};
      for (int n : o.scaling) p.scaling.push_back(m.predict(w, n, plan.grid_g_per_kwh));
      plan.instances.push_back(std::move(p));
    }
  }
  return plan;
}

}  // namespace

std::pair<double, double> packing_of(const std::string& data_dir) {
  const fs::path dir = fs::path(data_dir).lexically_normal();
  for (const fs::path& meta : {dir / "metadata.json", dir.parent_path() / "metadata.json"}) {
    std::error_code ec;
    if (!fs::is_regular_file(meta, ec)) continue;
    const std::string where = meta.string();
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(read_text_file(where));
    } catch (const nlohmann::json::exception& e) {
      throw joule::UsageError(where + ": not JSON (" + e.what() + ")", "give --packing a packed data set's directory");
    }
    if (!j.is_object() || !j.contains("packing"))
      throw joule::UsageError(where + " records no packing: " + data_dir + " is not a packed data set",
                              "pack it with `joule data pack`, or give --padded-efficiency and --packed-efficiency");
    const nlohmann::json packing = json_field<nlohmann::json>(j, "packing", where);
    return {json_field<double>(packing, "efficiency_before", where + " packing"),
            json_field<double>(packing, "efficiency_after", where + " packing")};
  }
  throw joule::UsageError(data_dir + " has no metadata.json (nor has its parent)",
                          "give --packing a directory `joule data pack` or `joule data create --pack` wrote");
}

std::string plan_text(const PlanOptions& o, const std::string& config_dir) {
  const Plan plan = run_plan(o, config_dir);
  const auto& planned = plan.instances;
  const Workload& w = plan.workload;
  std::ostringstream out;
  out << "joule plan: " << o.model << ", seq " << o.seq_len << " (" << w.max_predictions
      << " predictions), global batch " << o.global_batch << ", micro-batch " << o.micro_batch << " per device, "
      << format_number("%.4g", o.sequences) << " sequences, " << o.precision << " unless a row says otherwise, grid "
      << format_number("%.1f", plan.grid_g_per_kwh) << " g CO2/kWh\n";
  if (o.packed_efficiency > 0)
    out << "data: padded rows hold one sequence (" << format_number("%.1f", 100 * o.padded_efficiency)
        << " % of their tokens real); packed rows " << format_number("%.2f", o.packed_efficiency / o.padded_efficiency)
        << " sequences on average (" << format_number("%.1f", 100 * o.packed_efficiency)
        << " % real); a step trains --global-batch sequences either way\n";
  out << "\n";
  char line[512];
  std::snprintf(line, sizeof line, "%-16s %-9s %-15s %6s %8s %12s %13s %10s %11s %10s\n", "instance", "precision",
                "data", "nodes", "hours", "seq/hour", "kWh", "USD", "CO2 kg", "seq/s");
  out << line;
  for (const auto& p : planned) {
    const StepPrediction& r = p.at_nodes;
    std::snprintf(line, sizeof line, "%-16s %-9s %-15s %6d %8.2f %12.4g %13.1f %10.0f %11.1f %10.0f\n",
                  r.instance.c_str(), p.precision.c_str(), layout_label(p).c_str(), r.nodes, r.hours, r.seq_per_hour,
                  r.kwh, r.usd, r.co2_kg, r.seq_per_s);
    out << line;
  }
  out << "\nstep time breakdown at " << o.nodes << " nodes (seconds per step):\n";
  std::snprintf(line, sizeof line, "%-22s %9s %9s %11s %9s %9s %6s  %s\n", "instance", "step", "compute",
                "exposed comm", "comm", "other", "accum", "compute efficiency");
  out << line;
  for (const auto& p : planned) {
    const StepPrediction& r = p.at_nodes;
    std::snprintf(line, sizeof line, "%-22s %9.4f %9.4f %11.4f %9.4f %9.4f %6lld  %.3f, %s\n", row_name(p).c_str(),
                  r.step_s, r.compute_s, r.exposed_comm_s, r.comm_s, r.optimizer_s,
                  static_cast<long long>(r.accumulation), p.model.efficiency(o.seq_len),
                  p.model.efficiency_basis().c_str());
    out << line;
  }
  out << "\nmemory per device at " << o.nodes << " nodes (model state: fp32 weights and gradients, LAMB's moments"
      << (o.shard == trainer::OptimizerSharding::zero1 ? " split over the devices (zero1)"
                                                       : " whole on every device (--shard zero1 splits them)")
      << ", 16-bit weight copies; activations not included):\n";
  for (const auto& p : planned) {
    const StepPrediction& r = p.at_nodes;
    const double device_gib = p.model.profile().device_memory_gib;
    std::snprintf(line, sizeof line, "%-22s %8.2f GiB%s\n", row_name(p).c_str(), r.state_bytes_per_device / (1u << 30),
                  device_gib > 0 ? format_number(" of %.4g GiB", device_gib).c_str() : "");
    out << line;
  }
  out << "\nscaling (seq/hour; hours for the target in brackets):\n";
  std::snprintf(line, sizeof line, "%-22s", "nodes");
  out << line;
  for (int n : o.scaling) out << format_number("%21.0f", n);
  out << "\n";
  for (const auto& p : planned) {
    std::snprintf(line, sizeof line, "%-22s", row_name(p).c_str());
    out << line;
    for (const auto& r : p.scaling) {
      std::snprintf(line, sizeof line, "%11.3g (%6.1fh)", r.seq_per_hour, r.hours);
      out << line;
    }
    out << "\n";
  }
  out << "\nCompute-bound time from each profile's calibration; communication from the profile's links (α-β, "
         "hierarchical\n"
      << (o.shard == trainer::OptimizerSharding::zero1
              ? "reduce-scatter of DDP's buckets, overlapped with the last backward, then the fp32 "
                "weights' all-gather, exposed);\n"
              : "all-reduce of DDP's buckets, overlapped with the last backward); ")
      << "energy at device power by compute share.\n";
  return out.str();
}

std::string plan_json(const PlanOptions& o, const std::string& config_dir) {
  const auto planned = run_plan(o, config_dir).instances;
  auto row = [&o](const StepPrediction& r, const ClusterModel& m, const Planned& p) {
    return nlohmann::json{{"instance", r.instance},
                          {"precision", p.precision},
                          {"data", p.sequences_per_row > 1 ? "packed" : "padded"},
                          {"sequences_per_row", p.sequences_per_row},
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
                          {"optimizer_shard", trainer::sharding_name(o.shard)},
                          {"state_bytes_per_device", r.state_bytes_per_device},
                          {"accumulation", r.accumulation},
                          {"node_power_w", r.node_power_w},
                          {"efficiency", m.efficiency(o.seq_len)},
                          {"efficiency_basis", m.efficiency_basis()}};
  };
  nlohmann::json rows = nlohmann::json::array(), scaling = nlohmann::json::array();
  for (const auto& p : planned) {
    rows.push_back(row(p.at_nodes, p.model, p));
    for (const auto& r : p.scaling) scaling.push_back(row(r, p.model, p));
  }
  return nlohmann::json{{"rows", rows}, {"scaling", scaling}}.dump(2) + "\n";
}

}  // namespace joule::tools
