#include "trainer/cost/accounting.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <functional>
#include <random>
#include <sstream>

namespace joule::trainer {
namespace fs = std::filesystem;
using nlohmann::json;
namespace {

constexpr double kJoulesPerKwh = 3.6e6;
constexpr size_t kMaxHistory = 256;

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

// A figure with enough significant digits for tiny demo runs and for day-long ones.
std::string sig(double v) {
  if (v == 0) return "0";
  const double a = std::fabs(v);
  if (a >= 100) return fmt("%.0f", v);
  if (a >= 1) return fmt("%.2f", v);
  return fmt("%.3g", v);
}

json cost_json(const CostSettings& c) {
  return {{"instance", c.instance},         {"instance_file", c.instance_file}, {"usd_per_hour", c.usd_per_hour},
          {"price_source", c.price_source}, {"pue", c.pue},                     {"pue_source", c.pue_source},
          {"region", c.region.name},        {"country", c.region.country},      {"provider", c.region.provider},
          {"grid_g_per_kwh", c.region.g_per_kwh}, {"grid_source", c.grid_source}};
}

CostSettings cost_from_json(const json& j) {
  CostSettings c;
  c.instance = j.at("instance");
  c.instance_file = j.value("instance_file", "");
  c.usd_per_hour = j.at("usd_per_hour");
  c.price_source = j.value("price_source", "");
  c.pue = j.at("pue");
  c.pue_source = j.value("pue_source", "");
  c.region.name = j.at("region");
  c.region.country = j.value("country", "");
  c.region.provider = j.value("provider", "");
  c.region.g_per_kwh = j.at("grid_g_per_kwh");
  c.grid_source = j.value("grid_source", "");
  return c;
}

json figures_json(const Figures& f) {
  return {{"it_kwh", f.it_kwh}, {"facility_kwh", f.facility_kwh}, {"usd", f.usd}, {"co2_kg", f.co2_kg}, {"instance_hours", f.instance_hours}};
}

// "model", "rapl", "rapl+model": the sources that contributed any energy.
std::string sources_text(const EnergyTotals& e) {
  std::string s;
  for (int k = 0; k < kSources; ++k) {
    double j = 0;
    for (int c = 0; c < kComponents; ++c) j += e.at(static_cast<Component>(c), static_cast<Source>(k));
    if (j > 0) s += (s.empty() ? "" : "+") + std::string(source_name(static_cast<Source>(k)));
  }
  return s.empty() ? "none" : s;
}

}  // namespace

std::string duration_text(double seconds) {
  char buf[64];
  if (!std::isfinite(seconds)) return "?";
  if (seconds < 120) std::snprintf(buf, sizeof buf, "%.1f s", seconds);
  else if (seconds < 7200) std::snprintf(buf, sizeof buf, "%.1f min", seconds / 60);
  else std::snprintf(buf, sizeof buf, "%.2f h", seconds / 3600);
  return buf;
}

CostSettings resolve_cost_settings(const CostOverrides& o, const std::string& device, const std::string& config_dir,
                                   InstanceProfile* profile_out) {
  // auto: the machine the numerics run on; trainium-sim computes here too (its cluster is simulated, not billed)
  const std::string name = o.instance == "auto" ? (device == "cpu" || device == "trainium-sim" ? "cpu-host" : "") : o.instance;
  if (name.empty())
    throw ProfileError("accounting.instance is auto, which only knows --device cpu; name the instance (--instance p4d.24xlarge)");
  const InstanceProfile p = load_instance_profile(name, (fs::path(config_dir) / "hardware").string());
  CostSettings c;
  c.instance = p.name;
  c.instance_file = p.file;
  if (o.price_per_hour >= 0) {
    c.usd_per_hour = o.price_per_hour;
    c.price_source = "--price-per-hour";
  } else {
    c.usd_per_hour = p.usd_per_hour;
    c.price_source = "profile " + fs::path(p.file).filename().string();
  }
  if (o.pue > 0) {
    if (o.pue < 1) throw ProfileError("--pue " + std::to_string(o.pue) + ": a PUE is at least 1.0");
    c.pue = o.pue;
    c.pue_source = "--pue";
  } else {
    c.pue = p.pue;
    c.pue_source = "profile " + fs::path(p.file).filename().string();
  }
  c.region = load_grid_region(o.region, (fs::path(config_dir) / "grid-intensity.toml").string());
  c.grid_source = "grid-intensity.toml region " + o.region;
  if (o.grid_intensity > 0) {
    c.region.g_per_kwh = o.grid_intensity;
    c.grid_source = "--grid-intensity";
  }
  if (profile_out) *profile_out = p;
  return c;
}

Figures account(const EnergyTotals& energy, double wall_s, int nodes, const CostSettings& cost) {
  Figures f;
  f.it_kwh = energy.total() / kJoulesPerKwh;
  f.facility_kwh = f.it_kwh * cost.pue;
  f.instance_hours = nodes * wall_s / 3600.0;
  f.usd = f.instance_hours * cost.usd_per_hour;
  f.co2_kg = f.facility_kwh * cost.region.g_per_kwh / 1000.0;
  return f;
}

Figures Ledger::totals() const {
  Figures t;
  for (const Segment& s : segments) {
    const Figures f = s.figures();
    t.it_kwh += f.it_kwh;
    t.facility_kwh += f.facility_kwh;
    t.usd += f.usd;
    t.co2_kg += f.co2_kg;
    t.instance_hours += f.instance_hours;
  }
  return t;
}

EnergyTotals Ledger::energy() const {
  EnergyTotals e;
  for (const Segment& s : segments) e += s.energy;
  return e;
}

double Ledger::wall_s() const {
  double w = 0;
  for (const Segment& s : segments) w += s.wall_s;
  return w;
}

void Ledger::add_projection(const ProjectionPoint& p) {
  history.push_back(p);
  if (history.size() > kMaxHistory) {  // keep the first, then every other one
    std::vector<ProjectionPoint> thinned;
    for (size_t i = 0; i < history.size(); ++i)
      if (i == 0 || i % 2 == 1 || i + 1 == history.size()) thinned.push_back(history[i]);
    history = std::move(thinned);
  }
}

json energy_json(const EnergyTotals& e) {
  json components = json::object();
  for (int c = 0; c < kComponents; ++c) {
    const Component comp = static_cast<Component>(c);
    if (e.component(comp) <= 0) continue;
    json by_source = json::object();
    for (int s = 0; s < kSources; ++s)
      if (e.at(comp, static_cast<Source>(s)) > 0) by_source[source_name(static_cast<Source>(s))] = e.at(comp, static_cast<Source>(s)) / kJoulesPerKwh;
    components[component_name(comp)] = {{"kwh", e.component(comp) / kJoulesPerKwh}, {"sources", by_source}};
  }
  return {{"it_kwh", e.total() / kJoulesPerKwh}, {"components", components}, {"source", sources_text(e)}};
}

json Ledger::to_json() const {
  json segs = json::array();
  for (const Segment& s : segments) {
    json raw = json::array();
    for (double j : s.energy.joules) raw.push_back(j);
    segs.push_back({{"start_step", s.start_step}, {"end_step", s.end_step}, {"sequences", s.sequences}, {"wall_s", s.wall_s},
                    {"ranks", s.ranks}, {"nodes", s.nodes}, {"started_utc", s.started_utc}, {"ended_utc", s.ended_utc},
                    {"status", s.status}, {"meters", s.meters}, {"cost", cost_json(s.cost)}, {"energy_joules", raw},
                    {"energy", energy_json(s.energy)}, {"figures", figures_json(s.figures())}});
  }
  json hist = json::array();
  for (const ProjectionPoint& p : history)
    hist.push_back({{"step", p.step}, {"sequences", p.sequences}, {"wall_s", p.wall_s}, {"target_wall_s", p.target_wall_s},
                    {"target_kwh", p.target_kwh}, {"target_usd", p.target_usd}, {"target_co2_kg", p.target_co2_kg}});
  return {{"run_id", run_id}, {"project_name", project_name}, {"segments", segs}, {"projection_history", hist}};
}

Ledger Ledger::from_json(const json& j) {
  Ledger l;
  l.run_id = j.at("run_id");
  l.project_name = j.value("project_name", "joule");
  for (const json& s : j.at("segments")) {
    Segment g;
    g.start_step = s.at("start_step");
    g.end_step = s.at("end_step");
    g.sequences = s.at("sequences");
    g.wall_s = s.at("wall_s");
    g.ranks = s.at("ranks");
    g.nodes = s.at("nodes");
    g.started_utc = s.value("started_utc", "");
    g.ended_utc = s.value("ended_utc", "");
    g.status = s.value("status", "");
    g.meters = s.value("meters", "");
    g.cost = cost_from_json(s.at("cost"));
    const json& raw = s.at("energy_joules");
    if (raw.size() != g.energy.joules.size()) throw ProfileError("ledger: energy_joules has " + std::to_string(raw.size()) + " entries");
    for (size_t i = 0; i < raw.size(); ++i) g.energy.joules[i] = raw[i];
    l.segments.push_back(g);
  }
  for (const json& p : j.value("projection_history", json::array()))
    l.history.push_back({p.at("step"), p.at("sequences"), p.at("wall_s"), p.at("target_wall_s"), p.at("target_kwh"), p.at("target_usd"),
                         p.at("target_co2_kg")});
  return l;
}

std::string new_run_id() {
  std::random_device rd;
  std::mt19937_64 g((static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(std::time(nullptr)));
  uint64_t a = g(), b = g();
  a = (a & ~0xF000ull) | 0x4000ull;                        // version 4
  b = (b & ~(0xC000000000000000ull)) | 0x8000000000000000ull;  // variant 10
  char buf[40];
  std::snprintf(buf, sizeof buf, "%08llx-%04llx-%04llx-%04llx-%012llx", static_cast<unsigned long long>(a >> 32),
                static_cast<unsigned long long>((a >> 16) & 0xFFFF), static_cast<unsigned long long>(a & 0xFFFF),
                static_cast<unsigned long long>(b >> 48), static_cast<unsigned long long>(b & 0xFFFFFFFFFFFFull));
  return buf;
}

std::string utc_now_iso() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

namespace {

// `base` plus `seconds` more at the average rates of `f` over `done_wall_s`.
Projection extend(Projection base, const Figures& f, double done_wall_s, double seconds) {
  const double per_s = 1.0 / done_wall_s;
  base.wall_s += seconds;
  base.kwh += f.facility_kwh * per_s * seconds;
  base.usd += f.usd * per_s * seconds;
  base.co2_kg += f.co2_kg * per_s * seconds;
  return base;
}

}  // namespace

Projection project_target(int64_t target, int64_t done, double done_wall_s, const Figures& f, double seq_per_s) {
  Projection spent{target, done_wall_s, f.facility_kwh, f.usd, f.co2_kg};
  if (!(seq_per_s > 0) || !(done_wall_s > 0)) return Projection{target};
  return extend(spent, f, done_wall_s, static_cast<double>(std::max<int64_t>(0, target - done)) / seq_per_s);
}

Projection project_hypothetical(int64_t target, double done_wall_s, const Figures& f, double seq_per_s) {
  if (!(seq_per_s > 0) || !(done_wall_s > 0)) return Projection{target};
  return extend(Projection{target}, f, done_wall_s, static_cast<double>(target) / seq_per_s);
}

std::string prometheus_text(const json& row, const std::string& run_id) {
  std::ostringstream out;
  for (const auto& [key, value] : row.items()) {
    if (!value.is_number()) continue;
    const std::string name = "joule_" + key;
    out << "# TYPE " << name << " gauge\n" << name << "{run_id=\"" << run_id << "\"} " << fmt("%.17g", value.get<double>()) << "\n";
  }
  return out.str();
}

// ---- the training-cost summary, from summary.json -----------------------------------------------------
namespace {
using Row = std::function<void(const std::string& key, const std::string& value)>;

// The run's own target and the card's 450M sequences, projected; and how the first projection compared.
void projection_rows(const json& s, const Row& row) {
  const json& proj = s.at("projection");
  for (const char* which : {"target", "card_450M"}) {
    if (!proj.contains(which)) continue;
    const json& p = proj[which];
    row(std::string(std::string(which) == "target" ? "projected, the run's target" : "projected, 450M sequences"),
        std::to_string(p.value("sequences", 0LL)) + " seq: " + duration_text(p.value("wall_s", 0.0)) + ", " + sig(p.value("kwh", 0.0)) + " kWh, USD " + sig(p.value("usd", 0.0)) + ", " +
            sig(p.value("co2_kg", 0.0)) + " kg CO2 on this cluster");
  }
  const json& hist = proj.value("history", json::array());
  if (!hist.empty() && s.value("status", "") == "finished") {
    const json& first = hist.front();
    const double actual = s.value("wall_s", 0.0), predicted = first.value("target_wall_s", 0.0);
    row("projection converged", "first " + duration_text(predicted) + " at step " + std::to_string(first.value("step", 0)) + ", actual " +
                                    duration_text(actual) + " (" + fmt("%+.1f", actual > 0 ? 100.0 * (predicted - actual) / actual : 0.0) +
                                    " %), " + std::to_string(hist.size()) + " projections");
  }
}

// The SIMULATED block of --device trainium-sim.
void simulated_rows(const json& m, const Row& row) {
  row("SIMULATED cluster", std::to_string(m.value("nodes", 0)) + " x " + m.value("instance", "") + " (" + std::to_string(m.value("devices", 0)) +
                               " devices, global batch " + std::to_string(m.value("global_batch", 0LL)) + "), not measured");
  row("SIMULATED step", fmt("%.4g", m.value("step_s", 0.0)) + " s: compute " + fmt("%.4g", m.value("compute_s", 0.0)) + ", exposed comm " +
                            fmt("%.4g", m.value("exposed_comm_s", 0.0)) + " (of " + fmt("%.4g", m.value("comm_s", 0.0)) + "), other " +
                            fmt("%.4g", m.value("other_s", 0.0)));
  row("SIMULATED throughput", sig(m.value("seq_per_s", 0.0)) + " seq/s, " + sig(m.value("seq_per_hour", 0.0)) + " seq/hour");
  row("SIMULATED, " + sig(m.value("target_sequences", 0.0)) + " seq", duration_text(m.value("wall_s_for_target", 0.0)) + ", " +
                                                                       sig(m.value("kwh_for_target", 0.0)) + " kWh, USD " +
                                                                       sig(m.value("usd_for_target", 0.0)) + ", " +
                                                                       sig(m.value("co2_kg_for_target", 0.0)) + " kg CO2");
}

}  // namespace

std::string summary_table(const json& s) {
  std::ostringstream out;
  auto row = [&](const std::string& k, const std::string& v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "  %-34s ", k.c_str());
    out << buf << v << "\n";
  };
  out << "\ntraining-cost summary (" << (fs::path(s.value("run_dir", ".")) / "summary.json").string() << ")\n";
  row("status", s.value("status", "?"));
  row("steps", std::to_string(s.value("steps", 0)) + " on " + std::to_string(s.value("ranks", 0)) + " rank(s), " +
                   std::to_string(s.value("nodes", 0)) + " node(s)");
  row("sequences processed", std::to_string(s.value("sequences", 0)));
  const int segments = s.value("segments", 1);
  row("wall time", duration_text(s.value("wall_s", 0.0)) + (segments > 1 ? " over " + std::to_string(segments) + " segments" : ""));
  const double sps = s.value("seq_per_s", 0.0);
  row("throughput (after warm-up)", sig(sps) + " seq/s, " + sig(sps * 3600) + " seq/hour" +
                                        (s.contains("mfu") && s["mfu"].is_number() ? ", MFU " + fmt("%.3f", s["mfu"].get<double>()) : ""));
  const json& inst = s.at("instance");
  row("instance", inst.value("instance", "?") + " x " + std::to_string(s.value("nodes", 1)) + " node(s), USD " +
                      sig(inst.value("usd_per_hour", 0.0)) + "/h (" + inst.value("price_source", "") + ")");
  const json& e = s.at("energy");
  std::string parts;
  for (const auto& [comp, v] : e.at("components").items()) {
    std::string srcs;
    for (const auto& [src, kwh] : v.at("sources").items()) {
      (void)kwh;
      srcs += (srcs.empty() ? "" : "+") + src;
    }
    parts += (parts.empty() ? "" : ", ") + comp + " " + sig(v.value("kwh", 0.0)) + " [" + srcs + "]";
  }
  row("energy (IT equipment)", sig(e.value("it_kwh", 0.0)) + " kWh: " + (parts.empty() ? "nothing metered" : parts));
  row("energy (facility, PUE " + fmt("%.2f", inst.value("pue", 1.0)) + ")", sig(s.value("energy_kwh", 0.0)) + " kWh (" + s.value("energy_source", "") + ")");
  row("cost", "USD " + sig(s.value("cost_usd", 0.0)) + " (" + sig(s.value("instance_hours", 0.0)) + " instance-hours x USD " +
                  sig(inst.value("usd_per_hour", 0.0)) + "/h)");
  row("CO2", sig(s.value("co2_kg", 0.0)) + " kg (" + sig(inst.value("grid_g_per_kwh", 0.0)) + " g/kWh, " + inst.value("grid_source", "") + ")");
  projection_rows(s, row);
  if (s.contains("simulated") && s["simulated"].is_object()) simulated_rows(s["simulated"], row);
  if (s.contains("eval") && s["eval"].is_object())
    row("last eval", "mlm_acc " + fmt("%.4f", s["eval"].value("mlm_accuracy", 0.0)) + ", nsp_acc " +
                         fmt("%.4f", s["eval"].value("nsp_accuracy", 0.0)) + ", loss " + fmt("%.4f", s["eval"].value("loss", 0.0)));
  if (segments > 1 || s.value("segment_list", json::array()).size() > 1) {
    int i = 1;
    for (const json& g : s.value("segment_list", json::array())) {
      const json& f = g.at("figures");
      row("segment " + std::to_string(i++), "steps " + std::to_string(g.value("start_step", 0)) + "-" + std::to_string(g.value("end_step", 0)) +
                                                ", " + duration_text(g.value("wall_s", 0.0)) + " on " + std::to_string(g.value("ranks", 0)) +
                                                " rank(s), " + sig(f.value("facility_kwh", 0.0)) + " kWh, USD " + sig(f.value("usd", 0.0)) +
                                                " (" + g.value("status", "") + ")");
    }
  }
  for (const auto& n : s.value("notices", json::array())) row("note", n.get<std::string>());
  if (s.contains("final_dir")) row("final weights (HF directory)", s["final_dir"].get<std::string>());
  return out.str();
}

const char* const kEmissionsCsvHeader =
    "timestamp,project_name,run_id,duration,emissions,emissions_rate,cpu_power,gpu_power,ram_power,cpu_energy,gpu_energy,"
    "ram_energy,energy_consumed,country_iso_code,region,cloud_provider,cloud_region,os,cpu_count,cpu_model,gpu_count,"
    "gpu_model,ram_total_size,tracking_mode,on_cloud,pue,energy_source,instance,nodes,sequences,cost_usd";

std::string emissions_csv(const json& s) {
  auto quote = [](std::string v) {
    if (v.find_first_of(",\"\n") == std::string::npos) return v;
    std::string q = "\"";
    for (char c : v) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
  };
  auto num = [](double v) { return fmt("%.9g", v); };
  std::ostringstream out;
  out << kEmissionsCsvHeader << "\n";
  const json& host = s.value("host", json::object());
  for (const json& g : s.value("segment_list", json::array())) {
    const json& cost = g.at("cost");
    const json& f = g.at("figures");
    const json& comps = g.at("energy").at("components");
    auto kwh = [&](const char* c) { return comps.contains(c) ? comps[c].value("kwh", 0.0) : 0.0; };
    const double wall = std::max(1e-9, g.value("wall_s", 0.0));
    const double cpu = kwh("cpu"), ram = kwh("ram"), acc = kwh("gpu") + kwh("neuron");
    const int nodes = g.value("nodes", 1);
    const std::string provider = cost.value("provider", "");
    out << quote(g.value("ended_utc", "")) << "," << quote(s.value("project_name", "joule")) << "," << quote(s.value("run_id", "")) << ","
        << num(wall) << "," << num(f.value("co2_kg", 0.0)) << "," << num(f.value("co2_kg", 0.0) / wall) << "," << num(cpu * 3.6e6 / wall) << ","
        << num(acc * 3.6e6 / wall) << "," << num(ram * 3.6e6 / wall) << "," << num(cpu) << "," << num(acc) << "," << num(ram) << ","
        << num(f.value("facility_kwh", 0.0)) << "," << quote(cost.value("country", "")) << "," << quote(cost.value("region", "")) << ","
        << quote(provider) << "," << quote(provider.empty() ? "" : cost.value("region", "")) << "," << quote(host.value("os", "")) << ","
        << host.value("vcpus", 0) * nodes << "," << quote(host.value("cpu_model", "")) << "," << host.value("devices", 0) * nodes << ","
        << quote(host.value("device_model", "")) << "," << num(host.value("memory_gib", 0.0) * nodes) << ",machine,"
        << (provider.empty() ? "N" : "Y") << "," << num(cost.value("pue", 1.0)) << "," << quote(g.at("energy").value("source", "")) << ","
        << quote(cost.value("instance", "")) << "," << nodes << "," << g.value("sequences", 0LL) << "," << num(f.value("usd", 0.0)) << "\n";
  }
  return out.str();
}

}  // namespace joule::trainer
