#include "tools/report_inference.h"

#include <filesystem>
#include <sstream>

#include <nlohmann/json.hpp>

#include "launch/util/error.h"
#include "launch/util/file_io.h"
#include "tools/bench_infer.h"
#include "tools/plan_inference.h"
#include "tools/report.h"
#include "tools/report_charts.h"

namespace joule::tools {
namespace fs = std::filesystem;
using html::Bar;
using html::bar_chart;
using html::esc;
using html::fig;
using html::line_chart;
using html::num;
using html::Series;
namespace {

struct InferenceRun {
  std::string file;
  InferBenchResult result;
};

InferenceRun read_run(const std::string& run_dir) {
  const std::string file = inference_run_file(run_dir);
  if (file.empty())
    throw joule::IoError(run_dir + ": not an inference run (no inference.json)",
                         "write one with `joule bench infer --out " + run_dir + "`");
  return {file, InferBenchResult::from_json(read_text_file(file), file)};
}

}  // namespace

std::string inference_summary(const std::string& run_dir, bool json) {
  const InferenceRun run = read_run(run_dir);
  if (json) return nlohmann::json::parse(run.result.to_json()).dump(2) + "\n";
  return "joule inference run " + run_dir + (run.result.date.empty() ? "" : " (" + run.result.date + ")") + "\n" +
         run.result.to_text();
}

namespace {

// Each batch size measured: a table, the throughput-latency curve, latency per batch size, cost and energy per million.
std::string measured_section(const InferBenchResult& r) {
  Series curve{"inferences/s against p99 latency (batch sizes in the table)", "#386cb0", {}};
  Series dots{"a batch size", "#386cb0", {}, true};
  Series p50{"p50", "#1b9e77", {}}, p99{"p99", "#d95f02", {}};
  std::vector<Bar> usd_bars, kwh_bars;
  std::ostringstream points;
  points << "<table><tr><th>batch</th><th>inferences/s</th><th>p50 ms</th><th>p99 ms</th><th>kWh per million "
            "(IT)</th><th>USD per million</th><th>kg CO2 per million</th><th>matmul roofline</th><th>of the "
            "processor's peak</th></tr>\n";
  for (size_t i = 0; i < r.points.size(); ++i) {
    const InferPoint& p = r.points[i];
    curve.points.push_back({p.p99_ms, p.inferences_per_s});
    dots.points.push_back({p.p99_ms, p.inferences_per_s});
    p50.points.push_back({static_cast<double>(p.batch), p.p50_ms});
    p99.points.push_back({static_cast<double>(p.batch), p.p99_ms});
    const std::string label = "batch " + std::to_string(p.batch);
    usd_bars.push_back({label, {{"USD", p.usd_per_million}}});
    kwh_bars.push_back({label, {{"kWh", p.joules_per_million / 3.6e6}}});
    points << "<tr><td>" << p.batch << (static_cast<int>(i) == r.chosen ? " (best)" : "") << "</td><td>"
           << fig(p.inferences_per_s) << "</td><td>" << fig(p.p50_ms) << "</td><td>" << fig(p.p99_ms) << "</td><td>"
           << fig(p.joules_per_million / 3.6e6) << "</td><td>" << fig(p.usd_per_million) << "</td><td>"
           << fig(r.co2_kg_per_million(p)) << "</td><td>" << num(100 * p.roofline_fraction, "%.0f") << " %</td><td>"
           << (r.peak_gflops > 0 ? num(100 * r.peak_fraction(p), "%.0f") + " %" : "unknown") << "</td></tr>\n";
  }
  points << "</table>\n";
  return "<h2>Throughput and latency</h2>\n<div class=\"charts\">\n" +
         line_chart("Throughput against p99 latency", "p99 latency of a batch call (ms)", "inferences/s",
                    {curve, dots}) +
         line_chart("Latency per batch size", "batch size", "ms per batch call", {p50, p99}) + "</div>\n" +
         points.str() + "<h2>Per million inferences</h2>\n<div class=\"charts\">\n" +
         bar_chart("Cost per million inferences", "USD", usd_bars) +
         bar_chart("Energy per million inferences (IT)", "kWh", kwh_bars) + "</div>\n";
}

// Each offered rate served: the latency-against-rate curve (the bound drawn across it), served against offered, a
// table, cost and energy per million at each rate.
std::string served_section(const InferBenchResult& r) {
  Series p50{"p50", "#1b9e77", {}}, p90{"p90", "#7570b3", {}}, p99{"p99", "#d95f02", {}};
  Series bound{"p99 bound", "#999999", {}}, served{"served", "#386cb0", {}}, offered{"= offered", "#999999", {}};
  std::vector<Bar> usd_bars, kwh_bars;
  std::ostringstream rows;
  rows << "<table><tr><th>offered/s</th><th>served/s</th><th>p50 ms</th><th>p90 ms</th><th>p99 ms</th><th>errors</th>"
          "<th>mean batch</th><th>kWh per million (IT)</th><th>USD per million</th><th>kg CO2 per million</th></tr>\n";
  for (size_t i = 0; i < r.points.size(); ++i) {
    const InferPoint& p = r.points[i];
    p50.points.push_back({p.offered_per_s, p.p50_ms});
    p90.points.push_back({p.offered_per_s, p.p90_ms});
    p99.points.push_back({p.offered_per_s, p.p99_ms});
    served.points.push_back({p.offered_per_s, p.inferences_per_s});
    offered.points.push_back({p.offered_per_s, p.offered_per_s});
    if (r.p99_bound_ms > 0) bound.points.push_back({p.offered_per_s, r.p99_bound_ms});
    const std::string label = num(p.offered_per_s, "%g") + "/s";
    usd_bars.push_back({label, {{"USD", p.usd_per_million}}});
    kwh_bars.push_back({label, {{"kWh", p.joules_per_million / 3.6e6}}});
    rows << "<tr><td>" << num(p.offered_per_s, "%g") << (static_cast<int>(i) == r.chosen ? " (best)" : "")
         << "</td><td>" << fig(p.inferences_per_s) << "</td><td>" << fig(p.p50_ms) << "</td><td>" << fig(p.p90_ms)
         << "</td><td>" << fig(p.p99_ms) << "</td><td>" << p.errors << "</td><td>" << num(p.mean_batch, "%.2f")
         << "</td><td>" << fig(p.joules_per_million / 3.6e6) << "</td><td>" << fig(p.usd_per_million) << "</td><td>"
         << fig(r.co2_kg_per_million(p)) << "</td></tr>\n";
  }
  rows << "</table>\n";
  std::vector<Series> latency = {p50, p90, p99};
  if (!bound.points.empty()) latency.push_back(bound);
  return "<h2>Latency against the offered rate</h2>\n<p class=\"note\">One-example requests at Poisson arrivals, "
         "each rate in turn; a request's latency counts from its arrival time (open loop), so a server that falls "
         "behind shows it here.</p>\n<div class=\"charts\">\n" +
         line_chart("Latency against offered rate", "offered requests/s", "ms from arrival to answer", latency) +
         line_chart("Served against offered rate", "offered requests/s", "inferences/s served", {served, offered}) +
         "</div>\n" + rows.str() + "<h2>Per million inferences</h2>\n<div class=\"charts\">\n" +
         bar_chart("Cost per million inferences at each rate", "USD", usd_bars) +
         bar_chart("Energy per million inferences at each rate (IT, the server's meters)", "kWh", kwh_bars) +
         "</div>\n";
}

// One row of the fleet table from `joule plan --inference --json`'s row; adds its bars when it was sized.
void fleet_row(const nlohmann::json& row, std::ostringstream& fleet, std::vector<Bar>& usd, std::vector<Bar>& kwh) {
  const std::string instance = row.at("instance").get<std::string>();
  if (!row.at("sized").get<bool>()) {
    fleet << "<tr><td>" << esc(instance) << "</td><td colspan=\"9\">" << esc(row.at("note").get<std::string>())
          << "</td></tr>\n";
    return;
  }
  fleet << "<tr><td>" << esc(instance) << "</td><td>" << esc(row.at("precision").get<std::string>()) << "</td><td>"
        << row.at("batch").get<int64_t>() << "</td><td>" << fig(row.at("inferences_per_s").get<double>()) << "</td><td>"
        << row.at("instances").get<int>() << "</td><td>" << fig(row.at("usd_per_hour").get<double>()) << "</td><td>"
        << fig(row.at("usd_per_million").get<double>()) << "</td><td>" << fig(row.at("kwh_per_million").get<double>())
        << "</td><td>" << fig(row.at("co2_kg_per_million").get<double>()) << "</td><td>"
        << esc(row.at("ran").get<std::string>() + "; " + row.at("basis").get<std::string>()) << "</td></tr>\n";
  usd.push_back({instance, {{"USD", row.at("usd_per_million").get<double>()}}});
  kwh.push_back({instance, {{"kWh", row.at("kwh_per_million").get<double>()}}});
}

// This run's model and length on every inference profile, this measurement as this host's row (`joule plan
// --inference --measured RUN`); a note instead when it cannot be planned.
std::string fleet_section(const InferBenchResult& r, const std::string& run_dir, const std::string& config_dir) {
  InferencePlanOptions plan;
  plan.model = r.model;
  plan.seq_len = r.seq_len;
  plan.p99_ms = r.p99_bound_ms;
  plan.measured = {run_dir};
  plan.region = r.region.empty() ? "world" : r.region;
  std::ostringstream h;
  h << "<h2>This model on each inference profile</h2>\n<p class=\"note\">1,000,000 inferences per hour of "
    << esc(r.model) << " at " << r.seq_len << " tokens"
    << (r.p99_bound_ms > 0 ? ", p99 within " + num(r.p99_bound_ms, "%g") + " ms" : "")
    << ", 20 % headroom: <code>joule plan --inference --measured " << esc(run_dir)
    << "</code> (published figures, FLOP-scaled where they ran another model or length; VALIDATION.md, "
       "\"Inference\"). The row \"this host\" is this run.</p>\n";
  std::ostringstream fleet;
  std::vector<Bar> usd, kwh;
  try {
    const nlohmann::json j = nlohmann::json::parse(inference_plan_json(plan, config_dir));
    fleet << "<table><tr><th>instance</th><th>precision</th><th>batch</th><th>inferences/s</th><th>instances</th>"
             "<th>USD/h</th><th>USD per million</th><th>kWh per million (facility)</th><th>kg CO2 per million</th>"
             "<th>basis</th></tr>\n";
    for (const auto& row : j.at("rows")) fleet_row(row, fleet, usd, kwh);
    fleet << "</table>\n";
  } catch (const std::exception& e) {
    return h.str() + "<p class=\"note\">not planned: " + esc(e.what()) + "</p>\n";
  }
  return h.str() + fleet.str() + "<div class=\"charts\">\n" +
         bar_chart("Cost per million inferences on each fleet", "USD", usd) +
         bar_chart("Energy per million inferences on each fleet (facility)", "kWh", kwh) + "</div>\n";
}

// The page's head and the run's key figures as a two-column table.
std::string inference_overview(const InferenceRun& run, const std::string& run_dir) {
  const InferBenchResult& r = run.result;
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>joule inference run " << esc(run_dir)
    << "</title>\n"
    << "<style>body{font-family:sans-serif;margin:24px;color:#222;max-width:1340px}h1{font-size:20px}h2{font-size:16px;"
       "margin-top:28px}table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:4px 8px;"
       "text-align:left}.charts{display:flex;flex-wrap:wrap;gap:16px}.note{color:#666;font-size:12px}</style>"
       "</head><body>\n<h1>joule inference report</h1>\n<p><code>"
    << esc(run.file) << "</code>" << (r.date.empty() ? "" : ", measured " + esc(r.date)) << "</p>\n<table>\n";
  auto kv = [&](const std::string& k, const std::string& v) {
    h << "<tr><th>" << esc(k) << "</th><td>" << esc(v) << "</td></tr>\n";
  };
  kv("model", r.architecture + " (" + r.model + "), " + std::to_string(r.seq_len) + " tokens");
  kv("precision", r.precision_reason.empty() ? r.precision : r.precision_reason);
  kv("threads", std::to_string(r.threads));
  if (r.served())
    kv("load", "served by joule serve: one-example requests at Poisson arrivals, batches of up to " +
                   std::to_string(r.points.front().batch));
  const std::string within = r.p99_bound_ms > 0 ? " within p99 " + num(r.p99_bound_ms, "%g") + " ms" : "";
  if (r.chosen >= 0) {
    const InferPoint& best = r.points[static_cast<size_t>(r.chosen)];
    kv((r.served() ? "highest rate served" : "best throughput") + within,
       (r.served() ? "offered " + num(best.offered_per_s, "%g") + "/s" : "batch " + std::to_string(best.batch)) + ": " +
           fig(best.inferences_per_s) + " inferences/s, p99 " + fig(best.p99_ms) + " ms, USD " +
           fig(best.usd_per_million) + " and " + fig(best.joules_per_million / 3.6e6) + " kWh per million");
  } else {
    kv((r.served() ? "highest rate served" : "best throughput") + within,
       r.served() ? "no rate served without errors within the bound" : "no batch size meets the bound");
  }
  kv("energy (IT)", r.energy_sources);
  kv("price", r.instance + ", USD " + fig(r.usd_per_hour) + " per hour");
  kv("CO2", "PUE " + fig(r.pue) + " x " + fig(r.grid_g_per_kwh) + " g/kWh (" + r.region + ")");
  if (!r.served()) kv("matmul rate on these GEMMs", fig(r.sgemm_gflops) + " GFLOP/s");
  h << "</table>\n";
  return h.str();
}

}  // namespace

std::string write_inference_report(const std::string& run_dir, const std::string& out, const std::string& config_dir) {
  const InferenceRun run = read_run(run_dir);
  const std::string page = inference_overview(run, run_dir) +
                           (run.result.served() ? served_section(run.result) : measured_section(run.result)) +
                           fleet_section(run.result, run_dir, config_dir) + "</body></html>\n";
  const std::string path = out.empty() ? (fs::path(run_dir) / "report.html").string() : out;
  write_file_atomically(path, page);
  return path;
}

}  // namespace joule::tools
