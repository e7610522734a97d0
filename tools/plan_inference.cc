#include "tools/plan_inference.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "launch/util/error.h"
#include "launch/util/file_io.h"
#include "launch/util/format.h"
#include "launch/util/json_field.h"
#include "tools/bench_infer.h"
#include "trainer/cost/hardware.h"
#include "trainer/sim/inference_sizing.h"

namespace joule::tools {
namespace fs = std::filesystem;
using cost::InstanceProfile;
using sim::FleetSizing;
using sim::InferenceRate;
using sim::InferenceWorkload;
namespace {

const char* const kMeasuredHint =
    "give the output of `joule bench infer --json` or `joule bench serve --json` (one JSON object per line), or their "
    "--out directory, to --measured";

// One line of a measurement file as a rate, with the model and length it ran.
struct MeasuredPoint {
  std::string tool;  // what measured it: "joule bench infer" (batches back to back) or "joule bench serve"
  std::string model;
  int64_t seq_len = 0;
  InferenceRate rate;
};

MeasuredPoint measured_point(const nlohmann::json& j, const nlohmann::json& run, const std::string& where) {
  MeasuredPoint m;
  auto positive = [&](const nlohmann::json& from, const char* key) {
    const double v = from.at(key).get<double>();
    if (!(v > 0) || !std::isfinite(v) || v > 1e12)
      throw joule::Error(where + ": " + key + " is " + from.at(key).dump() + "; it must be a positive number",
                         kMeasuredHint);
    return v;
  };
  auto whole = [&](const nlohmann::json& from, const char* key) {
    const nlohmann::json& v = from.at(key);
    if (!v.is_number_integer() || v.get<int64_t>() < 1 || v.get<int64_t>() > 1000000)
      throw joule::Error(where + ": " + key + " is " + v.dump() + "; it must be a whole number from 1 to 1000000",
                         kMeasuredHint);
    return v.get<int64_t>();
  };
  try {
    m.model = run.at("model").get<std::string>();
    m.seq_len = whole(run, "seq_len");
    m.rate.precision = run.at("precision").get<std::string>();
    m.rate.batch = whole(j, "batch");
    m.rate.inferences_per_s = positive(j, "inferences_per_s");
    m.rate.p50_ms = positive(j, "p50_ms");
    m.rate.p99_ms = positive(j, "p99_ms");
  } catch (const nlohmann::json::exception& e) {
    throw joule::Error(where + ": not a `joule bench infer` result: " + joule::json_error_words(e), kMeasuredHint);
  }
  if (m.rate.p99_ms < m.rate.p50_ms)
    throw joule::Error(where + ": p99_ms " + format_number("%g", m.rate.p99_ms) + " is below p50_ms " +
                           format_number("%g", m.rate.p50_ms),
                       kMeasuredHint);
  return m;
}

// Every joule point of the files: `joule bench infer --json` lines ({..., "points": [...]}) or infer_compare.py's
// records (impl "joule"; the other implementations' lines and the environment record are skipped).
std::vector<MeasuredPoint> read_measured(const std::vector<std::string>& files) {
  std::vector<MeasuredPoint> out;
  for (const std::string& given : files) {
    const std::string run = inference_run_file(given);  // an inference run's directory: its inference.json
    const std::string& file = run.empty() ? given : run;
    std::ifstream in(file);
    if (!in) throw joule::IoError(file + ": cannot read the measurement (--measured)");
    int line_no = 0;
    const size_t before = out.size();
    for (std::string line; std::getline(in, line);) {
      ++line_no;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      const std::string where = file + ":" + std::to_string(line_no);
      nlohmann::json j;
      try {
        j = nlohmann::json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        throw joule::Error(where + ": not JSON: " + joule::json_error_words(e), kMeasuredHint);
      }
      if (!j.is_object() || !j.contains("impl") || j.at("impl") != "joule") continue;
      const size_t first = out.size();
      const bool served = j.contains("load") && j.at("load") == "served";
      if (j.contains("points")) {
        // A served point with errors is a rate the server did not sustain.
        for (const auto& p : j.at("points")) {
          const bool failed = served && p.is_object() && p.contains("errors") &&
                              !(p.at("errors").is_number_integer() && p.at("errors").get<int64_t>() == 0);
          if (!failed) out.push_back(measured_point(p, j, where));
        }
      } else {
        out.push_back(measured_point(j, j, where));
      }
      for (size_t k = first; k < out.size(); ++k) {
        out[k].model = path_from_file(out[k].model, file);
        out[k].tool = served ? "joule bench serve" : "joule bench infer";
      }
    }
    if (out.size() == before)
      throw joule::Error(file +
                             ": no joule measurement in it (a served one counts only the rates served without "
                             "errors)",
                         kMeasuredHint);
  }
  return out;
}

struct InferencePlan {
  InferenceWorkload workload;
  std::vector<FleetSizing> rows;
};

InferencePlan run_inference_plan(const InferencePlanOptions& o, const std::string& config_dir) {
  const std::string presets = (fs::path(config_dir) / "models").string();
  InferencePlan plan;
  InferenceWorkload& w = plan.workload;
  w.model_name = o.model;
  w.model = models::load_config(o.model, presets);
  w.seq_len = o.seq_len;
  if (w.seq_len < 1 || w.seq_len > w.model.max_position_embeddings)
    throw joule::UsageError("--seq-len " + std::to_string(w.seq_len) + " is outside 1.." +
                            std::to_string(w.model.max_position_embeddings) + " (" + o.model + "'s positions)");
  if (!(o.rate_per_hour >= kMinRatePerHour && o.rate_per_hour <= kMaxRatePerHour))
    throw joule::UsageError("--rate must be from 1 to 1e12 inferences per hour");
  if (!(o.headroom >= 0)) throw joule::UsageError("--headroom must be 0 or more");
  w.rate_per_hour = o.rate_per_hour;
  w.p99_ms = o.p99_ms;
  w.headroom = o.headroom;
  w.grid_g_per_kwh =
      o.grid_intensity > 0
          ? o.grid_intensity
          : cost::load_grid_region(o.region, (fs::path(config_dir) / "grid-intensity.toml").string()).g_per_kwh;
  // --measured FILE (this host) or PROFILE=FILE (a measurement taken on an instance of that profile).
  std::map<std::string, std::vector<std::string>> measured;
  for (const std::string& m : o.measured) {
    const size_t eq = m.find('=');
    const std::string profile = eq == std::string::npos ? "" : m.substr(0, eq),
                      file = eq == std::string::npos ? m : m.substr(eq + 1);
    if (file.empty() || (eq != std::string::npos && profile.empty()))
      throw joule::UsageError("--measured '" + m + "': give FILE (this host) or PROFILE=FILE, comma-separated");
    measured[profile].push_back(file);
  }
  auto measured_rates = [&](const std::string& profile) {
    std::vector<InferenceRate> rates;
    const auto it = measured.find(profile);
    if (it == measured.end()) return rates;
    std::string files;
    for (const std::string& f : it->second) files += (files.empty() ? "" : ", ") + f;
    const std::string where = profile.empty() ? "on this host" : "on " + profile;
    for (MeasuredPoint& m : read_measured(it->second)) {
      m.rate.source = m.tool + ": " + files;
      try {
        rates.push_back(
            sim::measured_rate(models::load_config(m.model, presets), m.model, m.seq_len, m.rate, w, where));
      } catch (const joule::Error& e) {
        throw joule::Error(files + ": " + e.what(), e.hint());
      }
    }
    return rates;
  };
  std::vector<std::string> names;
  for (const std::string& n : o.instances)  // each named once
    if (std::find(names.begin(), names.end(), n) == names.end()) names.push_back(n);
  if (names.empty()) names = cost::list_instance_profiles(sim::inference_profile_dir(config_dir));
  for (const auto& [profile, files] : measured)
    if (!profile.empty() && std::find(names.begin(), names.end(), profile) == names.end()) names.push_back(profile);
  for (const std::string& name : names) {
    const InstanceProfile p = cost::load_instance_profile(name, sim::inference_profile_dir(config_dir));
    std::vector<InferenceRate> rates = measured_rates(name);
    for (InferenceRate& r : sim::published_rates(p, w, presets)) rates.push_back(std::move(r));
    plan.rows.push_back(sim::size_fleet(p, rates, w));
  }
  if (measured.count("")) {
    // This host: priced and powered by the cpu-host profile (this machine's vCPUs and memory).
    InstanceProfile host = cost::load_instance_profile("cpu-host", (fs::path(config_dir) / "hardware").string());
    host.name = "this host";
    host.description = "this host (cpu-host profile, " + std::to_string(host.vcpus) + " vCPUs)";
    plan.rows.push_back(sim::size_fleet(host, measured_rates(""), w));
  }
  return plan;
}

// 1,000,000 inferences/hour (277.8/s)
std::string rate_text(double per_hour) {
  std::string n = format_number("%.0f", per_hour);
  if (std::fabs(per_hour - std::round(per_hour)) > 1e-6 || per_hour >= 1e15)
    n = format_number("%.6g", per_hour);
  else
    for (int i = static_cast<int>(n.size()) - 3; i > 0; i -= 3) n.insert(static_cast<size_t>(i), ",");
  return n + " inferences/hour (" + format_number("%.4g", per_hour / 3600) + "/s)";
}

}  // namespace

double parse_rate_per_hour(const std::string& text) {
  const size_t slash = text.find('/');
  const std::string hint = "write the rate with its unit: 1000000/h, 278/s or 16667/min";
  if (slash == std::string::npos) throw joule::UsageError("--rate '" + text + "' has no unit", hint);
  const std::string number = text.substr(0, slash), unit = text.substr(slash + 1);
  double v = 0;
  size_t used = 0;
  try {
    v = std::stod(number, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != number.size() || !(v > 0) || !std::isfinite(v))
    throw joule::UsageError("--rate '" + text + "': '" + number + "' is not a positive number", hint);
  const double per_hour = unit == "h" || unit == "hour" ? v : unit == "min" ? v * 60 : unit == "s" ? v * 3600 : -1;
  if (per_hour < 0) throw joule::UsageError("--rate '" + text + "': unknown unit '" + unit + "'", hint);
  if (!(per_hour >= kMinRatePerHour && per_hour <= kMaxRatePerHour))
    throw joule::UsageError("--rate '" + text + "' is " + format_number("%g", per_hour) +
                                " inferences per hour; joule plans from " + format_number("%g", kMinRatePerHour) +
                                " to " + format_number("%g", kMaxRatePerHour),
                            hint);
  return per_hour;
}

std::string inference_plan_text(const InferencePlanOptions& o, const std::string& config_dir) {
  const InferencePlan plan = run_inference_plan(o, config_dir);
  const InferenceWorkload& w = plan.workload;
  std::ostringstream out;
  out << "joule plan --inference: " << o.model << ", seq " << w.seq_len << ", " << rate_text(w.rate_per_hour)
      << ", p99 " << (w.p99_ms > 0 ? "<= " + format_number("%g", w.p99_ms) + " ms" : "not bounded") << ", headroom "
      << format_number("%g", 100 * w.headroom) << " %, grid " << format_number("%.1f", w.grid_g_per_kwh)
      << " g CO2/kWh\n\n";
  char line[512];
  std::snprintf(line, sizeof line, "%-14s %-20s %5s %9s %8s %9s %5s %9s %8s %8s %9s\n", "instance", "precision",
                "batch", "inf/s", "p99 ms", "instances", "util", "USD/h", "USD/1M", "kWh/1M", "kg CO2/1M");
  out << line;
  const FleetSizing *cheapest = nullptr, *greenest = nullptr;
  for (const FleetSizing& s : plan.rows) {
    if (!s.sized) {
      std::snprintf(line, sizeof line, "%-14s %s\n", s.instance.c_str(), s.note.c_str());
      out << line;
      continue;
    }
    const InferenceRate& r = s.rate;
    const std::string p99 = r.p99_ms > 0      ? format_number("%.3g", r.p99_ms)
                            : r.tail_ms() > 0 ? std::string(r.tail_name()) + " " + format_number("%.3g", r.tail_ms())
                                              : "?";
    std::snprintf(line, sizeof line, "%-14s %-20s %5lld %9.1f %8s %9lld %4.0f%% %9.2f %8.3f %8.3f %9.4f\n",
                  s.instance.c_str(), r.precision.c_str(), static_cast<long long>(r.batch), r.inferences_per_s,
                  p99.c_str(), static_cast<long long>(s.instances), 100 * s.utilisation, s.usd_per_hour,
                  s.usd_per_million, s.kwh_per_million, s.co2_kg_per_million);
    out << line;
    if (!cheapest || s.usd_per_million < cheapest->usd_per_million) cheapest = &s;
    if (!greenest || s.kwh_per_million < greenest->kwh_per_million) greenest = &s;
  }
  if (cheapest)
    out << "\ncheapest: " << cheapest->instance << " (" << format_number("%.3g", cheapest->usd_per_million)
        << " USD per million); least energy: " << greenest->instance << " ("
        << format_number("%.3g", greenest->kwh_per_million) << " kWh per million)\n";
  if (cheapest) out << "\nwhere each throughput comes from:\n";
  for (const FleetSizing& s : plan.rows) {
    if (!s.sized) continue;
    out << "  " << s.instance << ": " << s.rate.ran << "; " << s.rate.basis << (s.note.empty() ? "" : "; " + s.note)
        << "\n      " << s.rate.source << "\n";
  }
  out << "\nInstances = ceil(rate x (1 + headroom) / per-instance throughput); power at the fleet's utilisation "
         "(devices idle to maximum, host CPUs at 25 %; a CPU instance's CPUs by utilisation), times the profile's "
         "PUE.\nFigures run at another model or sequence length are scaled by GEMM FLOPs per inference "
         "(attention included): an estimate, labelled.\n";
  return out.str();
}

namespace {

nlohmann::json row_json(const FleetSizing& s) {
  nlohmann::json j = {{"instance", s.instance}, {"description", s.description}, {"sized", s.sized}, {"note", s.note}};
  if (!s.sized) return j;
  j.update({{"precision", s.rate.precision},
            {"batch", s.rate.batch},
            {"inferences_per_s", s.rate.inferences_per_s},
            {"p50_ms", s.rate.p50_ms},
            {"p95_ms", s.rate.p95_ms},
            {"p99_ms", s.rate.p99_ms},
            {"basis", s.rate.basis},
            {"ran", s.rate.ran},
            {"source", s.rate.source},
            {"instances", s.instances},
            {"utilisation", s.utilisation},
            {"instance_power_w", s.instance_power_w},
            {"usd_per_hour", s.usd_per_hour},
            {"usd_per_million", s.usd_per_million},
            {"kwh_per_million", s.kwh_per_million},
            {"co2_kg_per_million", s.co2_kg_per_million}});
  return j;
}

}  // namespace

std::string inference_plan_json(const InferencePlanOptions& o, const std::string& config_dir) {
  const InferencePlan plan = run_inference_plan(o, config_dir);
  const InferenceWorkload& w = plan.workload;
  nlohmann::json rows = nlohmann::json::array();
  for (const FleetSizing& s : plan.rows) rows.push_back(row_json(s));
  return nlohmann::json{{"workload",
                         {{"model", w.model_name},
                          {"seq_len", w.seq_len},
                          {"rate_per_hour", w.rate_per_hour},
                          {"p99_ms", w.p99_ms},
                          {"headroom", w.headroom},
                          {"grid_g_per_kwh", w.grid_g_per_kwh}}},
                        {"rows", rows}}
             .dump(2) +
         "\n";
}

std::string inference_plan_csv(const InferencePlanOptions& o, const std::string& config_dir) {
  const InferencePlan plan = run_inference_plan(o, config_dir);
  const InferenceWorkload& w = plan.workload;
  auto quoted = [](const std::string& s) {
    std::string q = "\"";
    for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
  };
  std::ostringstream out;
  out << "model,seq_len,rate_per_hour,p99_bound_ms,headroom,instance,precision,batch,inferences_per_s,p50_ms,p95_ms,"
         "p99_ms,"
         "instances,utilisation,usd_per_hour,usd_per_million,kwh_per_million,co2_kg_per_million,basis,source,note\n";
  for (const FleetSizing& s : plan.rows) {
    out << quoted(w.model_name) << "," << w.seq_len << "," << format_number("%.10g", w.rate_per_hour) << ","
        << format_number("%g", w.p99_ms) << "," << format_number("%g", w.headroom) << "," << quoted(s.instance) << ",";
    if (s.sized)
      out << quoted(s.rate.precision) << "," << s.rate.batch << "," << format_number("%.6g", s.rate.inferences_per_s)
          << "," << format_number("%.6g", s.rate.p50_ms) << "," << format_number("%.6g", s.rate.p95_ms) << ","
          << format_number("%.6g", s.rate.p99_ms) << "," << s.instances << "," << format_number("%.4f", s.utilisation)
          << "," << format_number("%.6g", s.usd_per_hour) << "," << format_number("%.6g", s.usd_per_million) << ","
          << format_number("%.6g", s.kwh_per_million) << "," << format_number("%.6g", s.co2_kg_per_million) << ","
          << quoted(s.rate.basis) << "," << quoted(s.rate.source) << ",";
    else
      out << ",,,,,,,,,,,,,,";
    out << quoted(s.note) << "\n";
  }
  return out.str();
}

}  // namespace joule::tools
