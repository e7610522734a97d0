// What `joule bench infer` and `joule bench serve` measured, as inference.json and as text: written, read back (by
// `joule summary`, `joule report`, `joule plan --inference --measured`) and priced, without LibTorch.
#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "launch/util/error.h"
#include "launch/util/file_io.h"
#include "launch/util/format.h"
#include "launch/util/json_field.h"
#include "tools/bench_infer.h"
#include "tools/config_dir.h"
#include "trainer/cost/energy.h"
#include "trainer/cost/hardware.h"

namespace joule::tools {

void InferBenchResult::price(const cost::InstanceProfile& profile, const std::string& grid_region) {
  instance = profile.name;
  usd_per_hour = profile.usd_per_hour;
  pue = profile.pue;
  region = grid_region;
  grid_g_per_kwh = cost::load_grid_region(region, config_dir() + "/grid-intensity.toml").g_per_kwh;
}

void InferBenchResult::choose() {
  chosen = -1;
  for (size_t i = 0; i < points.size(); ++i)
    if ((p99_bound_ms <= 0 || points[i].p99_ms <= p99_bound_ms) && points[i].errors == 0 &&
        (chosen < 0 || points[i].inferences_per_s > points[static_cast<size_t>(chosen)].inferences_per_s))
      chosen = static_cast<int>(i);
}

namespace {

// A figure joule could not measure here (0) as JSON null, so no reader takes it for a measured 0.
nlohmann::json unknown_if_zero(double v) { return v > 0 ? nlohmann::json(v) : nlohmann::json(nullptr); }

using joule::JsonField;
constexpr joule::JsonPresence kOptional = joule::JsonPresence::optional;

// inference.json's keys, once: the writer and the reader both go through these tables. Figures derived from others
// (CO2 and the peak fraction per point) are written beside them and not read.
const std::vector<JsonField<InferPoint>> kPointFields = {
    {"batch", &InferPoint::batch},
    {"calls", &InferPoint::calls, kOptional},
    {"inferences_per_s", &InferPoint::inferences_per_s},
    {"p50_ms", &InferPoint::p50_ms},
    {"p99_ms", &InferPoint::p99_ms},
    {"usd_per_million", &InferPoint::usd_per_million, kOptional},
    {"gflops", &InferPoint::gflops, kOptional},
    {"roofline_fraction", &InferPoint::roofline_fraction, kOptional}};

// A served point's figures besides (`joule bench serve`).
const std::vector<JsonField<InferPoint>> kServedPointFields = {{"offered_per_s", &InferPoint::offered_per_s},
                                                               {"p90_ms", &InferPoint::p90_ms},
                                                               {"errors", &InferPoint::errors},
                                                               {"mean_batch", &InferPoint::mean_batch}};

const std::vector<JsonField<InferBenchResult>> kResultFields = {
    {"load", &InferBenchResult::load, kOptional},
    {"date", &InferBenchResult::date, kOptional},
    {"model", &InferBenchResult::model},
    {"architecture", &InferBenchResult::architecture, kOptional},
    {"precision", &InferBenchResult::precision},
    {"precision_path", &InferBenchResult::precision_reason, kOptional},
    {"threads", &InferBenchResult::threads, kOptional},
    {"seq_len", &InferBenchResult::seq_len},
    {"p99_bound_ms", &InferBenchResult::p99_bound_ms, kOptional},
    {"sgemm_gflops", &InferBenchResult::sgemm_gflops, kOptional},
    {"peak_cores", &InferBenchResult::peak_cores, kOptional},
    {"energy_sources", &InferBenchResult::energy_sources, kOptional},
    {"instance", &InferBenchResult::instance, kOptional},
    {"usd_per_hour", &InferBenchResult::usd_per_hour, kOptional},
    {"pue", &InferBenchResult::pue, kOptional},
    {"region", &InferBenchResult::region, kOptional},
    {"grid_g_per_kwh", &InferBenchResult::grid_g_per_kwh, kOptional}};

}  // namespace

std::string InferBenchResult::to_json() const {
  nlohmann::json points_json = nlohmann::json::array();
  for (const InferPoint& p : points) {
    nlohmann::json q = nlohmann::json::object();
    joule::write_json_fields(p, kPointFields, q);
    if (served()) joule::write_json_fields(p, kServedPointFields, q);
    q["kwh_per_million"] = p.joules_per_million / 3.6e6;
    q["co2_kg_per_million"] = co2_kg_per_million(p);
    q["peak_fraction"] = unknown_if_zero(peak_fraction(p));
    points_json.push_back(q);
  }
  nlohmann::json j = nlohmann::json::object();
  joule::write_json_fields(*this, kResultFields, j);
  j["impl"] = "joule";
  j["schema_version"] = 1;
  j["peak_gflops"] = unknown_if_zero(peak_gflops);
  j["points"] = points_json;
  const InferPoint* best = chosen >= 0 ? &points[static_cast<size_t>(chosen)] : nullptr;
  if (served())
    j["chosen_offered_per_s"] = best ? nlohmann::json(best->offered_per_s) : nlohmann::json(nullptr);
  else
    j["chosen_batch"] = best ? nlohmann::json(best->batch) : nlohmann::json(nullptr);
  return j.dump();
}

InferBenchResult InferBenchResult::from_json(const std::string& text, const std::string& where) {
  InferBenchResult r;
  try {
    const nlohmann::json j = nlohmann::json::parse(text);
    joule::read_json_fields(j, kResultFields, r, where);
    if (j.contains("peak_gflops") && j["peak_gflops"].is_number()) r.peak_gflops = j["peak_gflops"].get<double>();
    if (r.load != "closed" && r.load != "served")
      throw std::invalid_argument("'load' is " + nlohmann::json(r.load).dump() + "; it is \"closed\" or \"served\"");
    for (const auto& p : joule::json_field<nlohmann::json>(j, "points", where)) {
      InferPoint q;
      joule::read_json_fields(p, kPointFields, q, where + " points");
      if (r.served()) joule::read_json_fields(p, kServedPointFields, q, where + " points");
      q.joules_per_million = joule::json_field_or<double>(p, "kwh_per_million", 0.0, where + " points") * 3.6e6;
      if (q.batch < 1 || !(q.inferences_per_s > 0)) throw std::invalid_argument("a point has no batch or no rate");
      r.points.push_back(q);
    }
  } catch (const std::exception& e) {
    std::string what = joule::json_error_words(e);  // the field readers' messages start with `where`: said once
    if (what.rfind(where + ": ", 0) == 0) what.erase(0, where.size() + 2);
    throw joule::Error(where + ": not a `joule bench infer` result: " + what,
                       "write one with `joule bench infer --out DIR` (DIR/inference.json)");
  }
  if (r.points.empty())
    throw joule::Error(where + ": a `joule bench infer` result without points", "measure at least one batch size");
  // Every figure read feeds a figure printed (per million inferences, per instance): each within a range that keeps
  // those finite.
  const auto within = [&](const std::string& key, double v, double lo, double hi) {
    if (!(v >= lo && v <= hi))
      throw joule::Error(where + ": '" + key + "' is " + joule::format_number("%g", v) + "; it must be in [" +
                             joule::format_number("%g", lo) + ", " + joule::format_number("%g", hi) + "]",
                         "the file was edited or damaged: measure again with `joule bench infer --out DIR`");
  };
  within("seq_len", static_cast<double>(r.seq_len), 1, 65536);
  within("usd_per_hour", r.usd_per_hour, 0, 1e6);
  within("pue", r.pue, 0, 10);
  within("grid_g_per_kwh", r.grid_g_per_kwh, 0, 5000);
  for (const InferPoint& q : r.points) {
    const std::string at = r.served() ? "points[offered " + joule::format_number("%g", q.offered_per_s) + "/s]."
                                      : "points[batch " + std::to_string(q.batch) + "].";
    within(at + "batch", static_cast<double>(q.batch), 1, 1 << 20);
    within(at + "inferences_per_s", q.inferences_per_s, 1e-9, 1e12);
    within(at + "p50_ms", q.p50_ms, 0, 1e7);
    within(at + "p99_ms", q.p99_ms, 0, 1e7);
    within(at + "kwh_per_million", q.joules_per_million / 3.6e6, 0, 1e9);
    within(at + "usd_per_million", q.usd_per_million, 0, 1e12);
    if (!r.served()) continue;
    within(at + "offered_per_s", q.offered_per_s, 1e-9, 1e12);
    within(at + "p90_ms", q.p90_ms, 0, 1e7);
    within(at + "errors", static_cast<double>(q.errors), 0, 1e15);
    within(at + "mean_batch", q.mean_batch, 0, static_cast<double>(q.batch));
  }
  r.choose();  // derived from the points and the bound: what was written is not trusted
  return r;
}

namespace {

// A served run's table: one row per offered rate.
std::string served_text(const InferBenchResult& r) {
  std::ostringstream s;
  s << r.architecture << " (" << r.model << ") served by joule serve, " << r.seq_len << " tokens a request, "
    << r.threads << " threads, " << r.precision << ", batches of up to " << r.points.front().batch << "\n"
    << "IT energy: the server's meters (" << r.energy_sources << "); price: " << r.instance << " (USD "
    << r.usd_per_hour << "/h); CO2: PUE " << r.pue << " x " << r.grid_g_per_kwh << " g/kWh (" << r.region << ")\n";
  char line[220];
  std::snprintf(line, sizeof line, "%10s %10s %9s %9s %9s %8s %7s %11s %11s\n", "offered/s", "served/s", "p50 ms",
                "p90 ms", "p99 ms", "errors", "batch", "kWh/1M", "USD/1M");
  s << line;
  for (size_t i = 0; i < r.points.size(); ++i) {
    const InferPoint& p = r.points[i];
    std::snprintf(line, sizeof line, "%10.1f %10.1f %9.2f %9.2f %9.2f %8lld %7.2f %11.4f %11.4f%s\n", p.offered_per_s,
                  p.inferences_per_s, p.p50_ms, p.p90_ms, p.p99_ms, static_cast<long long>(p.errors), p.mean_batch,
                  p.joules_per_million / 3.6e6, p.usd_per_million, static_cast<int>(i) == r.chosen ? "  <- best" : "");
    s << line;
  }
  if (r.chosen < 0)
    s << "no rate is served without errors"
      << (r.p99_bound_ms > 0 ? " within p99 <= " + joule::format_number("%g", r.p99_bound_ms) + " ms" : "") << "\n";
  else
    s << "highest rate served"
      << (r.p99_bound_ms > 0 ? " with p99 <= " + joule::format_number("%g", r.p99_bound_ms) + " ms" : "") << ": "
      << joule::format_number("%.1f", r.points[static_cast<size_t>(r.chosen)].inferences_per_s) << " inferences/s\n";
  return s.str();
}

}  // namespace

std::string InferBenchResult::to_text() const {
  if (served()) return served_text(*this);
  std::ostringstream s;
  s << architecture << " (" << model << "), sequence length " << seq_len << ", " << threads << " threads, "
    << precision_reason << "\n"
    << "IT energy: " << energy_sources << "; price: " << instance << " (USD " << usd_per_hour << "/h); CO2: PUE " << pue
    << " x " << grid_g_per_kwh << " g/kWh (" << region << ")\n"
    << "matmul rate on these GEMMs: " << static_cast<int64_t>(sgemm_gflops) << " GFLOP/s";
  if (peak_gflops > 0)
    s << "; the processor's " << precision << " peak"
      << (peak_cores > 0 ? " on " + std::to_string(peak_cores) + (peak_cores == 1 ? " core" : " cores") : "") << ": "
      << static_cast<int64_t>(peak_gflops) << " GFLOP/s";
  s << "\n";
  char line[200];
  std::snprintf(line, sizeof line, "%6s %10s %9s %9s %11s %11s %11s %9s %9s\n", "batch", "inf/s", "p50 ms", "p99 ms",
                "kWh/1M", "USD/1M", "kg CO2/1M", "roofline", "of peak");
  s << line;
  for (size_t i = 0; i < points.size(); ++i) {
    const InferPoint& p = points[i];
    const std::string of_peak = peak_gflops > 0 ? format_number("%.0f%%", 100 * peak_fraction(p)) : "-";
    std::snprintf(line, sizeof line, "%6lld %10.1f %9.2f %9.2f %11.4f %11.4f %11.4f %8.0f%% %9s%s\n",
                  static_cast<long long>(p.batch), p.inferences_per_s, p.p50_ms, p.p99_ms, p.joules_per_million / 3.6e6,
                  p.usd_per_million, co2_kg_per_million(p), 100 * p.roofline_fraction, of_peak.c_str(),
                  static_cast<int>(i) == chosen ? "  <- best" : "");
    s << line;
  }
  // A p99 of few calls is their slowest call or two: say so, and what --seconds would give each batch size 100.
  const auto fewest = std::min_element(points.begin(), points.end(),
                                       [](const InferPoint& a, const InferPoint& b) { return a.calls < b.calls; });
  if (fewest != points.end() && fewest->calls > 0 && fewest->calls < 100)
    s << "p99 from " << fewest->calls << " calls at batch " << fewest->batch
      << " (the fewest): little more than the slowest call; --seconds "
      << format_number("%.0f", std::ceil(100 * fewest->p50_ms / 1e3)) << " gives every batch size about 100 calls\n";
  if (chosen < 0)
    s << "no batch size meets p99 <= " << p99_bound_ms << " ms\n";
  else if (p99_bound_ms > 0)
    s << "best throughput with p99 <= " << p99_bound_ms << " ms: batch " << points[static_cast<size_t>(chosen)].batch
      << "\n";
  return s.str();
}

std::string inference_run_file(const std::string& dir) {
  std::error_code ec;
  const std::string file = (std::filesystem::path(dir) / "inference.json").string();
  return std::filesystem::is_directory(dir, ec) && std::filesystem::is_regular_file(file, ec) ? file : "";
}

std::string write_inference_run(const InferBenchResult& result, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw joule::IoError("--out " + dir + ": cannot create the directory: " + ec.message());
  const std::string file = (std::filesystem::path(dir) / "inference.json").string();
  InferBenchResult run = result;
  run.model = path_for_file(result.model, file);  // read back against inference.json, wherever the reader runs
  write_file_atomically(file, run.to_json() + "\n");
  return file;
}

}  // namespace joule::tools
