#include "trainer/cost/run_summary.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>

#include "launch/util/file_io.h"
#include "launch/util/format.h"
#include "launch/util/json_field.h"

namespace joule::cost {
namespace fs = std::filesystem;
using joule::json_field;
using joule::json_field_or;
using nlohmann::json;
namespace {

// "1,250 seq/s, 4,500,634 seq/hour"
std::string rate_text(double seq_per_s) {
  return readable(seq_per_s) + " seq/s, " + grouped(seq_per_s * 3600) + " seq/hour";
}

using joule::JsonField;
using joule::JsonPresence;
constexpr JsonPresence kOptional = JsonPresence::optional, kOmitDefault = JsonPresence::omit_default;

// Each document's keys, once: the writer and the reader below both go through these tables.
const std::vector<JsonField<Projection>> kProjectionFields = {{"sequences", &Projection::sequences},
                                                              {"wall_s", &Projection::wall_s},
                                                              {"kwh", &Projection::kwh},
                                                              {"usd", &Projection::usd},
                                                              {"co2_kg", &Projection::co2_kg}};

const std::vector<JsonField<HostInfo>> kHostFields = {
    {"os", &HostInfo::os, kOptional},           {"cpu_model", &HostInfo::cpu_model, kOptional},
    {"vcpus", &HostInfo::vcpus, kOptional},     {"memory_gib", &HostInfo::memory_gib, kOptional},
    {"devices", &HostInfo::devices, kOptional}, {"device_model", &HostInfo::device_model, kOptional},
    {"gemm", &HostInfo::gemm, kOmitDefault}};

const std::vector<JsonField<WorkloadInfo>> kWorkloadFields = {
    {"model", &WorkloadInfo::model},
    {"seq_len", &WorkloadInfo::seq_len},
    {"max_predictions", &WorkloadInfo::max_predictions},
    {"global_batch", &WorkloadInfo::global_batch},
    {"flops_per_sequence", &WorkloadInfo::flops_per_sequence, kOptional},
    {"dtype", &WorkloadInfo::dtype, kOptional},
    {"pack", &WorkloadInfo::pack, kOmitDefault},
    {"packing_efficiency", &WorkloadInfo::packing_efficiency, kOmitDefault}};

const std::vector<JsonField<EvalFigures>> kEvalFields = {{"mlm_loss", &EvalFigures::mlm_loss},
                                                         {"nsp_loss", &EvalFigures::nsp_loss},
                                                         {"loss", &EvalFigures::loss},
                                                         {"mlm_accuracy", &EvalFigures::mlm_accuracy},
                                                         {"nsp_accuracy", &EvalFigures::nsp_accuracy},
                                                         {"sequences", &EvalFigures::sequences}};

const std::vector<JsonField<TargetAccuracy>> kTargetAccuracyFields = {{"target", &TargetAccuracy::target},
                                                                      {"reached", &TargetAccuracy::reached},
                                                                      {"mlm_accuracy", &TargetAccuracy::mlm_accuracy},
                                                                      {"step", &TargetAccuracy::step},
                                                                      {"sequences", &TargetAccuracy::sequences},
                                                                      {"wall_s", &TargetAccuracy::wall_s}};

const std::vector<JsonField<SimulatedFigures>> kSimulatedFields = {
    {"instance", &SimulatedFigures::instance},
    {"efficiency_basis", &SimulatedFigures::efficiency_basis, kOptional},
    {"nodes", &SimulatedFigures::nodes},
    {"devices", &SimulatedFigures::devices},
    {"global_batch", &SimulatedFigures::global_batch},
    {"buckets", &SimulatedFigures::buckets, kOptional},
    {"sequences", &SimulatedFigures::sequences, kOptional},
    {"step_s", &SimulatedFigures::step_s},
    {"compute_s", &SimulatedFigures::compute_s},
    {"comm_s", &SimulatedFigures::comm_s},
    {"exposed_comm_s", &SimulatedFigures::exposed_comm_s},
    {"other_s", &SimulatedFigures::other_s},
    {"seq_per_s", &SimulatedFigures::seq_per_s},
    {"clock_s", &SimulatedFigures::clock_s, kOptional},
    {"target_sequences", &SimulatedFigures::target_sequences},
    {"wall_s_for_target", &SimulatedFigures::wall_s_for_target},
    {"kwh_for_target", &SimulatedFigures::kwh_for_target},
    {"usd_for_target", &SimulatedFigures::usd_for_target},
    {"co2_kg_for_target", &SimulatedFigures::co2_kg_for_target}};

const std::vector<JsonField<MemoryFigures>> kMemoryFields = {
    {"optimizer_shard", &MemoryFigures::optimizer_shard},
    {"peak_rss_bytes_max_rank", &MemoryFigures::peak_rss_bytes_max},
    {"peak_rss_bytes_min_rank", &MemoryFigures::peak_rss_bytes_min},
    {"optimizer_state_bytes_per_rank", &MemoryFigures::optimizer_state_bytes_per_rank},
    {"peak_device_bytes_max_rank", &MemoryFigures::peak_device_bytes_max, kOmitDefault}};

// The summary's own figures; what derives from the ledger (energy, cost, segments) and the nested documents are
// written and read beside them.
const std::vector<JsonField<RunSummary>> kSummaryFields = {
    {"run_dir", &RunSummary::run_dir, kOptional},
    {"status", &RunSummary::status},
    {"ranks", &RunSummary::ranks},
    {"nodes", &RunSummary::nodes},
    {"steps", &RunSummary::steps},
    {"sequences", &RunSummary::sequences},
    {"segments", &RunSummary::segments},
    {"nonfinite_skipped_steps", &RunSummary::nonfinite_skipped_steps, kOptional},
    {"target_sequences", &RunSummary::target_sequences},
    {"wall_s", &RunSummary::wall_s},
    {"seq_per_s", &RunSummary::seq_per_s},
    {"preempted", &RunSummary::preempted, kOptional},
    {"final_dir", &RunSummary::final_dir, kOmitDefault}};

template <typename T>
json to_json_with(const T& object, const std::vector<JsonField<T>>& fields) {
  json j = json::object();
  joule::write_json_fields(object, fields, j);
  return j;
}

template <typename T>
T from_json_with(const json& j, const std::vector<JsonField<T>>& fields, const std::string& where) {
  T object;
  joule::read_json_fields(j, fields, object, where);
  return object;
}

}  // namespace

json EvalFigures::to_json() const { return to_json_with(*this, kEvalFields); }

EvalFigures EvalFigures::from_json(const json& j, const std::string& where) {
  return from_json_with(j, kEvalFields, where);
}

std::string TargetAccuracy::text() const {
  return (reached ? "reached: " : "not reached (aborted): ") + format_number("%.4f", mlm_accuracy) +
         (reached ? " >= " : " < ") + format_number("%.4f", target) + " held-out masked-LM accuracy at " +
         grouped(static_cast<double>(sequences)) + " sequences (step " + std::to_string(step) + ", " +
         duration_text(wall_s) + " of training)" + (reached ? "" : ", the run's last eval");
}

json TargetAccuracy::to_json() const { return to_json_with(*this, kTargetAccuracyFields); }

TargetAccuracy TargetAccuracy::from_json(const json& j, const std::string& where) {
  return from_json_with(j, kTargetAccuracyFields, where);
}

json SimulatedFigures::to_json() const {
  json j = to_json_with(*this, kSimulatedFields);
  j["label"] = "simulated target cluster, not measured";
  j["seq_per_hour"] = seq_per_s * 3600;
  return j;
}

SimulatedFigures SimulatedFigures::from_json(const json& j, const std::string& where) {
  return from_json_with(j, kSimulatedFields, where);
}

const CostSettings& RunSummary::instance() const {
  static const CostSettings none;
  return ledger.segments.empty() ? none : ledger.segments.back().cost;
}

json MemoryFigures::to_json() const { return to_json_with(*this, kMemoryFields); }

MemoryFigures MemoryFigures::from_json(const json& j, const std::string& where) {
  return from_json_with(j, kMemoryFields, where);
}

json RunSummary::to_json() const {
  const Spent spent = ledger.totals();
  const json energy = energy_json(ledger.energy());
  json notes = json::array();
  for (const std::string& n : notices) notes.push_back(n);
  const auto [timed_sequences, timed_s] = ledger.timed();
  json s = to_json_with(*this, kSummaryFields);
  s.update({{"schema_version", kSummarySchemaVersion},
            {"run_id", ledger.run_id},
            {"project_name", ledger.project_name},
            {"billed_wall_s", ledger.wall_s()},
            {"seq_per_hour", seq_per_s * 3600},
            {"timed_sequences", timed_sequences},
            {"timed_s", timed_s},
            {"mfu", mfu ? json(*mfu) : json()},
            {"workload", to_json_with(workload, kWorkloadFields)},
            {"projected_wall_s_for_target", target.wall_s},
            {"projected_wall_s_for_450M", full_pretraining.wall_s},
            {"instance", ledger.segments.empty() ? json::object() : ledger.segments.back().to_json(false)["cost"]},
            {"host", to_json_with(host, kHostFields)},
            {"energy", energy},
            {"energy_kwh", spent.facility_kwh},
            {"energy_source", energy["source"]},
            {"cost_usd", spent.usd},
            {"instance_hours", spent.instance_hours},
            {"co2_kg", spent.co2_kg},
            {"projection",
             {{"target", to_json_with(target, kProjectionFields)},
              {"full_pretraining_450M", to_json_with(full_pretraining, kProjectionFields)},
              {"history", ledger.history_json()}}},
            {"segment_list", ledger.segments_json(false)},
            {"notices", notes},
            {"memory", memory.to_json()}});
  if (eval) s["eval"] = eval->to_json();
  if (target_accuracy) s["target_accuracy"] = target_accuracy->to_json();
  if (simulated) s["simulated"] = simulated->to_json();
  return s;
}

RunSummary RunSummary::from_json(const json& j, const std::string& where) {
  // Versions 1 (no key) to 4 read alike (what a version added is optional; a renamed key is read by either name); a
  // later one is refused.
  if (const int64_t version = json_field_or<int64_t>(j, "schema_version", 1, where); version > kSummarySchemaVersion)
    throw JsonFileError(where + ": schema_version " + std::to_string(version) + ", newer than this joule reads (" +
                            std::to_string(kSummarySchemaVersion) + ")",
                        "read it with the joule version that wrote it, or a newer one");
  RunSummary s = from_json_with(j, kSummaryFields, where);
  if (j.contains("mfu") && !j["mfu"].is_null()) s.mfu = json_field<double>(j, "mfu", where);
  s.workload = from_json_with(json_field<json>(j, "workload", where), kWorkloadFields, where + " workload");
  s.host = from_json_with(json_field_or<json>(j, "host", json::object(), where), kHostFields, where + " host");
  const json proj = json_field<json>(j, "projection", where);
  s.target = from_json_with(json_field<json>(proj, "target", where + " projection"), kProjectionFields,
                            where + " projection.target");
  // Schema 4 renamed the key; summaries written before it say card_450M.
  const char* full_key = proj.contains("full_pretraining_450M") ? "full_pretraining_450M" : "card_450M";
  s.full_pretraining = from_json_with(json_field<json>(proj, full_key, where + " projection"), kProjectionFields,
                                      where + " projection." + full_key);
  s.ledger = Ledger::from_parts(json_field<json>(j, "segment_list", where),
                                json_field_or<json>(proj, "history", json::array(), where), where);
  s.ledger.run_id = json_field<std::string>(j, "run_id", where);
  s.ledger.project_name = json_field_or<std::string>(j, "project_name", "joule", where);
  s.notices = json_field_or<std::vector<std::string>>(j, "notices", {}, where);
  if (j.contains("eval")) s.eval = EvalFigures::from_json(j["eval"], where + " eval");
  if (j.contains("target_accuracy"))
    s.target_accuracy = TargetAccuracy::from_json(j["target_accuracy"], where + " target_accuracy");
  if (j.contains("simulated")) s.simulated = SimulatedFigures::from_json(j["simulated"], where + " simulated");
  if (j.contains("memory")) s.memory = MemoryFigures::from_json(j["memory"], where + " memory");
  return s;
}

RunSummary read_run_summary(const std::string& run_dir) {
  const std::string path = (fs::path(run_dir) / "summary.json").string();
  std::string text;
  try {
    text = read_text_file(path);
  } catch (const IoError& e) {
    throw IoError(std::string(e.what()) + " (is this a joule run directory?)",
                  "give the run directory of a joule train run (it holds summary.json)");
  }
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw Error(path + ": " + json_syntax_problem(text, e),
                "the file is damaged or half-written: rerun `joule train --resume auto` to write it again");
  }
  RunSummary s = RunSummary::from_json(j, path);
  s.run_dir = run_dir;
  return s;
}

// ---- the training-cost table -------------------------------------------------------------------------
namespace {
using Row = std::function<void(const std::string& key, const std::string& value)>;

// The run's own target and a full pretraining's 450M sequences, projected; and how the first projection compared.
void projection_rows(const RunSummary& s, const Row& row) {
  // Both are of this run's model on this run's cluster: say so, so that a bert-tiny demo's figure is never read as
  // BERT-Large's (joule plan answers that).
  const std::string where = " of " + (s.workload.model.empty() ? std::string("this model") : s.workload.model) +
                            " on this cluster (" + std::to_string(s.nodes) + " x " + s.instance().instance + ")";
  for (const auto& [label, p] :
       {std::pair<const char*, const Projection&>{"projected, the run's target", s.target},
        std::pair<const char*, const Projection&>{"projected, 450M sequences", s.full_pretraining}})
    row(label, grouped(static_cast<double>(p.sequences)) + " seq: " + duration_text(p.wall_s) + ", " +
                   energy_text(p.kwh) + ", " + usd_text(p.usd) + ", " + mass_text(p.co2_kg) + " CO2" + where);
  const std::vector<ProjectionPoint>& hist = s.ledger.history;
  if (!hist.empty() && s.status == "finished") {
    const ProjectionPoint& first = hist.front();
    const double actual = s.wall_s, predicted = first.target_wall_s;
    row("projection converged", "first " + duration_text(predicted) + " at step " + std::to_string(first.step) +
                                    ", actual " + duration_text(actual) + " (" +
                                    format_number("%+.1f", actual > 0 ? 100.0 * (predicted - actual) / actual : 0.0) +
                                    " %), " + std::to_string(hist.size()) + " projections");
  }
}

// The SIMULATED block of --device trainium-sim.
void simulated_rows(const SimulatedFigures& m, const std::string& model, const Row& row) {
  row("SIMULATED cluster", std::to_string(m.nodes) + " x " + m.instance + " (" + std::to_string(m.devices) +
                               " devices, global batch " + std::to_string(m.global_batch) + "), not measured");
  row("SIMULATED step", format_number("%.4g", m.step_s) + " s: compute " + format_number("%.4g", m.compute_s) +
                            ", exposed comm " + format_number("%.4g", m.exposed_comm_s) + " (of " +
                            format_number("%.4g", m.comm_s) + "), other " + format_number("%.4g", m.other_s));
  row("SIMULATED throughput", rate_text(m.seq_per_s));
  row("SIMULATED, " + grouped(m.target_sequences) + " seq",
      duration_text(m.wall_s_for_target) + ", " + energy_text(m.kwh_for_target) + ", " + usd_text(m.usd_for_target) +
          ", " + mass_text(m.co2_kg_for_target) + " CO2");
  row("SIMULATED basis",
      m.efficiency_basis + "; that compute efficiency is applied unchanged to " + model +
          " (one step time predicted at start from this run's buckets; every step advances the clock by it)");
}

// "cpu 0.0012 [rapl+model], ram ..." from the energy by component and source.
std::string energy_parts(const EnergyTotals& e) {
  std::string parts;
  for (int c = 0; c < kComponents; ++c) {
    const Component comp = static_cast<Component>(c);
    if (e.component(comp) <= 0) continue;
    std::string srcs;
    for (int k = 0; k < kSources; ++k)
      if (e.at(comp, static_cast<Source>(k)) > 0)
        srcs += (srcs.empty() ? "" : "+") + std::string(source_name(static_cast<Source>(k)));
    parts += (parts.empty() ? "" : ", ") + std::string(component_name(comp)) + " " +
             energy_text(e.component(comp) / 3.6e6) + " [" + srcs + "]";
  }
  return parts.empty() ? "nothing metered" : parts;
}

void segment_rows(const RunSummary& s, const Row& row) {
  if (s.segments <= 1 && s.ledger.segments.size() <= 1) return;
  int i = 1;
  for (const Segment& g : s.ledger.segments) {
    const Spent f = g.figures();
    const std::string rate = g.timed_s > 0 ? readable(static_cast<double>(g.timed_sequences) / g.timed_s) + " seq/s, "
                                           : std::string("no step timed, ");
    row("segment " + std::to_string(i++), "steps " + std::to_string(g.start_step) + "-" + std::to_string(g.end_step) +
                                              ", " + duration_text(g.wall_s) + " on " + std::to_string(g.ranks) +
                                              " rank(s), " + rate + energy_text(f.facility_kwh) + ", " +
                                              usd_text(f.usd) + " (" + g.status + ")");
  }
}

}  // namespace

std::string summary_table(const RunSummary& s) {
  std::ostringstream out;
  auto row = [&](const std::string& k, const std::string& v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "  %-34s ", k.c_str());
    out << buf << v << "\n";
  };
  const CostSettings& inst = s.instance();
  const Spent spent = s.ledger.totals();
  const EnergyTotals energy = s.ledger.energy();
  out << "\ntraining-cost summary (" << (fs::path(s.run_dir.empty() ? "." : s.run_dir) / "summary.json").string()
      << ")\n";
  row("status", s.status);
  row("steps",
      std::to_string(s.steps) + " on " + std::to_string(s.ranks) + " rank(s), " + std::to_string(s.nodes) + " node(s)");
  row("sequences processed", grouped(static_cast<double>(s.sequences)));
  row("wall time",
      duration_text(s.wall_s) + (s.segments > 1 ? " over " + std::to_string(s.segments) + " segments" : ""));
  row(s.ledger.segments.size() > 1 ? "throughput (all segments' timed steps)" : "throughput (after warm-up)",
      rate_text(s.seq_per_s) +
          (s.mfu ? ", MFU " + format_number("%.3f", *s.mfu) + " of the " + s.workload.dtype + " peak" : ""));
  // What the rate leaves out, so that sequences / wall time and the rate can be told apart.
  if (const double timed_s = s.ledger.timed().second; timed_s > 0)
    row("time outside timed steps",
        duration_text(std::max(0.0, s.ledger.wall_s() - timed_s)) + " (start-up, warm-up steps, checkpoints, eval" +
            (s.ledger.segments.size() > 1 ? ", in each of " + std::to_string(s.ledger.segments.size()) + " segments"
                                          : std::string()) +
            ")");
  if (s.workload.packing_efficiency > 0)
    row("data", s.workload.pack > 0
                    ? "packed, up to " + std::to_string(s.workload.pack) +
                          " sequences a row: " + format_number("%.1f", 100 * s.workload.packing_efficiency) +
                          " % of the computed tokens are real"
                    : "padded, one sequence a row: " + format_number("%.1f", 100 * s.workload.packing_efficiency) +
                          " % of the computed tokens are real (`joule data pack` packs the rest away)");
  row("precision",
      s.workload.dtype == "bf16" ? "bf16 mixed precision (fp32 master weights and optimizer state)" : s.workload.dtype);
  if (const MemoryFigures& m = s.memory; m.peak_rss_bytes_max > 0) {
    const auto gib = [](double bytes) { return format_number("%.3g GiB", bytes / (1024.0 * 1024 * 1024)); };
    row("memory per rank (this segment)",
        "peak " + gib(m.peak_rss_bytes_max) +
            (s.ranks > 1 ? " resident (largest rank; smallest " + gib(m.peak_rss_bytes_min) + ")" : " resident") +
            (m.peak_device_bytes_max > 0 ? ", GPU " + gib(m.peak_device_bytes_max) : std::string()) +
            "; optimizer state " + gib(m.optimizer_state_bytes_per_rank) +
            (m.optimizer_shard == "zero1" ? " (zero1: 1/" + std::to_string(s.ranks) + " of it)" : " (whole)"));
  }
  row("instance", inst.instance + " x " + std::to_string(s.nodes) + " node(s), " + usd_text(inst.usd_per_hour) +
                      "/h (" + inst.price_source + ")");
  row("energy (IT equipment)", energy_text(spent.it_kwh) + ": " + energy_parts(energy));
  row("energy (facility, PUE " + format_number("%.2f", inst.pue) + ")",
      energy_text(spent.facility_kwh) + " (" + energy_json(energy)["source"].get<std::string>() + ")");
  row("cost", usd_text(spent.usd) + " (" + readable(spent.instance_hours) + " instance-hours x " +
                  usd_text(inst.usd_per_hour) + "/h)");
  row("CO2", mass_text(spent.co2_kg) + " (" + readable(inst.region.g_per_kwh) + " g/kWh, " + inst.grid_source + ")");
  projection_rows(s, row);
  if (s.simulated) simulated_rows(*s.simulated, s.workload.model, row);
  if (s.eval)
    row("last eval", "mlm_acc " + format_number("%.4f", s.eval->mlm_accuracy) + ", nsp_acc " +
                         format_number("%.4f", s.eval->nsp_accuracy) + ", loss " + format_number("%.4f", s.eval->loss));
  if (s.target_accuracy) row("target accuracy", s.target_accuracy->text());
  segment_rows(s, row);
  for (const std::string& n : s.notices) row("note", n);
  if (!s.final_dir.empty()) row("final weights (HF directory)", s.final_dir);
  return out.str();
}

// ---- emissions.csv -------------------------------------------------------------------------------------
const char* const kEmissionsCsvHeader =
    "timestamp,project_name,run_id,duration,emissions,emissions_rate,cpu_power,gpu_power,ram_power,cpu_energy,gpu_"
    "energy,"
    "ram_energy,energy_consumed,country_iso_code,region,cloud_provider,cloud_region,os,cpu_count,cpu_model,gpu_count,"
    "gpu_model,ram_total_size,tracking_mode,on_cloud,pue,energy_source,instance,nodes,sequences,cost_usd";

std::string emissions_csv(const RunSummary& s) {
  auto quote = [](std::string v) {
    if (v.find_first_of(",\"\n") == std::string::npos) return v;
    std::string q = "\"";
    for (char c : v) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
  };
  auto num = [](double v) { return format_number("%.9g", v); };
  std::ostringstream out;
  out << kEmissionsCsvHeader << "\n";
  const HostInfo& host = s.host;
  for (const Segment& g : s.ledger.segments) {
    const CostSettings& cost = g.cost;
    const Spent f = g.figures();
    auto kwh = [&](Component c) { return g.energy.component(c) / 3.6e6; };
    const double wall = std::max(1e-9, g.wall_s);
    const double cpu = kwh(Component::cpu), ram = kwh(Component::ram),
                 acc = kwh(Component::gpu) + kwh(Component::neuron);
    const int nodes = g.nodes;
    const std::string& provider = cost.region.provider;
    out << quote(g.ended_utc) << "," << quote(s.ledger.project_name) << "," << quote(s.ledger.run_id) << ","
        << num(wall) << "," << num(f.co2_kg) << "," << num(f.co2_kg / wall) << "," << num(cpu * 3.6e6 / wall) << ","
        << num(acc * 3.6e6 / wall) << "," << num(ram * 3.6e6 / wall) << "," << num(cpu) << "," << num(acc) << ","
        << num(ram) << "," << num(f.facility_kwh) << "," << quote(cost.region.country) << "," << quote(cost.region.name)
        << "," << quote(provider) << "," << quote(provider.empty() ? "" : cost.region.name) << "," << quote(host.os)
        << "," << host.vcpus * nodes << "," << quote(host.cpu_model) << "," << host.devices * nodes << ","
        << quote(host.device_model) << "," << num(host.memory_gib * nodes) << ",machine,"
        << (provider.empty() ? "N" : "Y") << "," << num(cost.pue) << ","
        << quote(energy_json(g.energy)["source"].get<std::string>()) << "," << quote(cost.instance) << "," << nodes
        << "," << g.sequences << "," << num(f.usd) << "\n";
  }
  return out.str();
}

// ---- metrics.jsonl ------------------------------------------------------------------------------------
MetricsHistory read_metrics_history(const std::string& run_dir) {
  const std::string path = (fs::path(run_dir) / "metrics.jsonl").string();
  std::istringstream in;
  try {
    in.str(read_text_file(path));
  } catch (const IoError& e) {
    throw IoError(e.what(), "give the run directory of a joule train run (it holds metrics.jsonl)");
  }
  std::map<int64_t, TrainPoint> train;
  std::map<int64_t, EvalPoint> eval;
  MetricsHistory h;
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    if (line.empty()) continue;
    const std::string where = path + ":" + std::to_string(line_no);
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception&) {
      if (in.eof()) {  // the last line, without its newline: a record cut short when its writer was killed
        h.torn_tail_bytes = static_cast<int64_t>(line.size());
        break;
      }
      throw Error(where + ": not valid JSON",
                  "the file is damaged at that line: remove the line (the rest of the run's history is kept) or "
                  "rerun");
    }
    const int64_t step = json_field<int64_t>(j, "step", where);
    if (j.contains("eval")) {
      eval[step] = {step, EvalFigures::from_json(j["eval"], where + " eval"),
                    json_field_or<double>(j, "sequences", -1, where), json_field_or<double>(j, "wall_s", -1, where)};
    } else {
      train[step] = {step,
                     json_field<double>(j, "sequences", where),
                     json_field<double>(j, "wall_s", where),
                     json_field<double>(j, "loss", where),
                     json_field<double>(j, "mlm_acc", where),
                     json_field<double>(j, "seq_per_s", where)};
    }
  }
  for (auto& [step, p] : train) h.train.push_back(p);
  for (auto& [step, p] : eval) h.eval.push_back(p);
  return h;
}

}  // namespace joule::cost
