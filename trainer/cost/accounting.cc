#include "trainer/cost/accounting.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <random>
#include <sstream>

#include "launch/util/format.h"
#include "launch/util/json_field.h"

namespace joule::cost {
namespace fs = std::filesystem;
using joule::json_field;
using joule::json_field_or;
using nlohmann::json;
namespace {

constexpr double kJoulesPerKwh = 3.6e6;
constexpr size_t kMaxHistory = 256;

using joule::JsonField;
constexpr joule::JsonPresence kOptional = joule::JsonPresence::optional;

// The ledger's documents, each key once: the writers and the readers below both go through these tables.
const std::vector<JsonField<CostSettings>> kCostFields = {{"instance", &CostSettings::instance},
                                                          {"instance_file", &CostSettings::instance_file, kOptional},
                                                          {"usd_per_hour", &CostSettings::usd_per_hour},
                                                          {"price_source", &CostSettings::price_source, kOptional},
                                                          {"pue", &CostSettings::pue},
                                                          {"pue_source", &CostSettings::pue_source, kOptional},
                                                          {"grid_source", &CostSettings::grid_source, kOptional}};
// The grid region, in the same object as the cost settings that hold it.
const std::vector<JsonField<GridRegion>> kRegionFields = {{"region", &GridRegion::name},
                                                          {"country", &GridRegion::country, kOptional},
                                                          {"provider", &GridRegion::provider, kOptional},
                                                          {"grid_g_per_kwh", &GridRegion::g_per_kwh}};
const std::vector<JsonField<Segment>> kSegmentFields = {{"start_step", &Segment::start_step},
                                                        {"end_step", &Segment::end_step},
                                                        {"sequences", &Segment::sequences},
                                                        {"wall_s", &Segment::wall_s},
                                                        {"ranks", &Segment::ranks},
                                                        {"nodes", &Segment::nodes},
                                                        {"started_utc", &Segment::started_utc, kOptional},
                                                        {"ended_utc", &Segment::ended_utc, kOptional},
                                                        {"status", &Segment::status, kOptional},
                                                        {"meters", &Segment::meters, kOptional},
                                                        {"timed_sequences", &Segment::timed_sequences, kOptional},
                                                        {"timed_s", &Segment::timed_s, kOptional}};
const std::vector<JsonField<ProjectionPoint>> kProjectionPointFields = {
    {"step", &ProjectionPoint::step},
    {"sequences", &ProjectionPoint::sequences},
    {"wall_s", &ProjectionPoint::wall_s},
    {"target_wall_s", &ProjectionPoint::target_wall_s},
    {"target_kwh", &ProjectionPoint::target_kwh},
    {"target_usd", &ProjectionPoint::target_usd},
    {"target_co2_kg", &ProjectionPoint::target_co2_kg}};

json cost_json(const CostSettings& c) {
  json j = json::object();
  joule::write_json_fields(c, kCostFields, j);
  joule::write_json_fields(c.region, kRegionFields, j);
  return j;
}

CostSettings cost_from_json(const json& j, const std::string& where) {
  CostSettings c;
  joule::read_json_fields(j, kCostFields, c, where);
  joule::read_json_fields(j, kRegionFields, c.region, where);
  return c;
}

// summary.json's "energy" object read back: kWh by component and source -> joules.
EnergyTotals energy_from_json(const json& j, const std::string& where) {
  EnergyTotals e;
  const json components = json_field<json>(j, "components", where);
  for (int c = 0; c < kComponents; ++c) {
    const Component comp = static_cast<Component>(c);
    if (!components.contains(component_name(comp))) continue;
    const std::string at = where + " components." + component_name(comp);
    const json sources = json_field<json>(components[component_name(comp)], "sources", at);
    for (int k = 0; k < kSources; ++k)
      e.at(comp, static_cast<Source>(k)) =
          json_field_or<double>(sources, source_name(static_cast<Source>(k)), 0.0, at) * kJoulesPerKwh;
  }
  return e;
}

json figures_json(const Spent& f) {
  return {{"it_kwh", f.it_kwh},
          {"facility_kwh", f.facility_kwh},
          {"usd", f.usd},
          {"co2_kg", f.co2_kg},
          {"instance_hours", f.instance_hours}};
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

CostSettings resolve_cost_settings(const AccountingOptions& o, const std::string& device, const std::string& config_dir,
                                   InstanceProfile* profile_out) {
  // auto: the machine the numerics run on; trainium-sim computes here too (its cluster is simulated, not billed)
  const std::string name =
      o.instance == "auto" ? (device == "cpu" || device == "trainium-sim" ? "cpu-host" : "") : o.instance;
  if (name.empty())
    throw ProfileError(
        "accounting.instance is auto, which only knows --device cpu; name the instance (--instance p4d.24xlarge)");
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

Spent account(const EnergyTotals& energy, double wall_s, int nodes, const CostSettings& cost) {
  Spent f;
  f.it_kwh = energy.total() / kJoulesPerKwh;
  f.facility_kwh = f.it_kwh * cost.pue;
  f.instance_hours = nodes * wall_s / 3600.0;
  f.usd = f.instance_hours * cost.usd_per_hour;
  f.co2_kg = f.facility_kwh * cost.region.g_per_kwh / 1000.0;
  return f;
}

Spent Ledger::totals() const {
  Spent t;
  for (const Segment& s : segments) {
    const Spent f = s.figures();
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

std::pair<int64_t, double> Ledger::timed() const {
  std::pair<int64_t, double> t{0, 0.0};
  for (const Segment& s : segments) t.first += s.timed_sequences, t.second += s.timed_s;
  return t;
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
      if (e.at(comp, static_cast<Source>(s)) > 0)
        by_source[source_name(static_cast<Source>(s))] = e.at(comp, static_cast<Source>(s)) / kJoulesPerKwh;
    components[component_name(comp)] = {{"kwh", e.component(comp) / kJoulesPerKwh}, {"sources", by_source}};
  }
  return {{"it_kwh", e.total() / kJoulesPerKwh}, {"components", components}, {"source", sources_text(e)}};
}

json Segment::to_json(bool raw_joules) const {
  json j = json::object();
  joule::write_json_fields(*this, kSegmentFields, j);
  j["cost"] = cost_json(cost);
  if (raw_joules) j["energy_joules"] = energy.joules;
  j["energy"] = energy_json(energy);
  j["figures"] = figures_json(figures());
  return j;
}

Segment Segment::from_json(const json& s, const std::string& where) {
  Segment g;
  joule::read_json_fields(s, kSegmentFields, g, where);
  g.cost = cost_from_json(json_field<json>(s, "cost", where), where + " cost");
  if (s.contains("energy_joules")) {  // a checkpoint's ledger: exact joules
    const auto raw = json_field<std::vector<double>>(s, "energy_joules", where);
    if (raw.size() != g.energy.joules.size())
      throw Error(where + ": energy_joules has " + std::to_string(raw.size()) + " entries, not " +
                      std::to_string(g.energy.joules.size()),
                  "the file was not written by this joule version: start a new run directory");
    std::copy(raw.begin(), raw.end(), g.energy.joules.begin());
  } else {  // summary.json: kWh by component and source
    g.energy = energy_from_json(json_field<json>(s, "energy", where), where + " energy");
  }
  return g;
}

json ProjectionPoint::to_json() const {
  json j = json::object();
  joule::write_json_fields(*this, kProjectionPointFields, j);
  return j;
}

ProjectionPoint ProjectionPoint::from_json(const json& p, const std::string& where) {
  ProjectionPoint point;
  joule::read_json_fields(p, kProjectionPointFields, point, where);
  return point;
}

json Ledger::segments_json(bool raw_joules) const {
  json segs = json::array();
  for (const Segment& s : segments) segs.push_back(s.to_json(raw_joules));
  return segs;
}

json Ledger::history_json() const {
  json hist = json::array();
  for (const ProjectionPoint& p : history) hist.push_back(p.to_json());
  return hist;
}

json Ledger::to_json() const {
  return {{"run_id", run_id},
          {"project_name", project_name},
          {"segments", segments_json(true)},
          {"projection_history", history_json()}};
}

Ledger Ledger::from_parts(const json& segments, const json& history, const std::string& where) {
  Ledger l;
  if (!segments.is_array())
    throw Error(where + ": the segment list is not an array", "the file is damaged: start a new run directory");
  for (size_t i = 0; i < segments.size(); ++i)
    l.segments.push_back(Segment::from_json(segments[i], where + " segment " + std::to_string(i + 1)));
  if (history.is_array())
    for (size_t i = 0; i < history.size(); ++i)
      l.history.push_back(ProjectionPoint::from_json(history[i], where + " projection " + std::to_string(i + 1)));
  return l;
}

Ledger Ledger::from_json(const json& j, const std::string& where) {
  Ledger l = from_parts(json_field<json>(j, "segments", where),
                        json_field_or<json>(j, "projection_history", json::array(), where), where);
  l.run_id = json_field<std::string>(j, "run_id", where);
  l.project_name = json_field_or<std::string>(j, "project_name", "joule", where);
  return l;
}

std::string new_run_id() {
  std::random_device rd;
  std::mt19937_64 g((static_cast<uint64_t>(rd()) << 32) ^ rd() ^ static_cast<uint64_t>(std::time(nullptr)));
  uint64_t a = g(), b = g();
  a = (a & ~0xF000ull) | 0x4000ull;                            // version 4
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
Projection extend(Projection base, const Spent& f, double done_wall_s, double seconds) {
  const double per_s = 1.0 / done_wall_s;
  base.wall_s += seconds;
  base.kwh += f.facility_kwh * per_s * seconds;
  base.usd += f.usd * per_s * seconds;
  base.co2_kg += f.co2_kg * per_s * seconds;
  return base;
}

}  // namespace

Projection project_target(int64_t target, int64_t done, double done_wall_s, const Spent& f, double seq_per_s) {
  Projection spent{target, done_wall_s, f.facility_kwh, f.usd, f.co2_kg};
  if (!(seq_per_s > 0) || !(done_wall_s > 0)) return Projection{target};
  return extend(spent, f, done_wall_s, static_cast<double>(std::max<int64_t>(0, target - done)) / seq_per_s);
}

Projection project_hypothetical(int64_t target, double done_wall_s, const Spent& f, double seq_per_s) {
  if (!(seq_per_s > 0) || !(done_wall_s > 0)) return Projection{target};
  return extend(Projection{target}, f, done_wall_s, static_cast<double>(target) / seq_per_s);
}

std::string prometheus_text(const json& row, const std::string& run_id) {
  std::ostringstream out;
  for (const auto& [key, value] : row.items()) {
    if (!value.is_number()) continue;
    const std::string name = "joule_" + key;
    out << "# TYPE " << name << " gauge\n"
        << name << "{run_id=\"" << run_id << "\"} " << format_number("%.17g", value.get<double>()) << "\n";
  }
  return out.str();
}

}  // namespace joule::cost
