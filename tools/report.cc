#include "tools/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "launch/util/error.h"
#include "launch/util/file_io.h"
#include "models/flops.h"
#include "tools/bench_infer.h"
#include "tools/report_charts.h"
#include "tools/report_inference.h"
#include "trainer/cost/run_summary.h"
#include "trainer/sim/perf_model.h"

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

struct ProfileEstimate {
  std::string instance, precision;
  int nodes = 0;
  double seq_per_s = 0, hours = 0, kwh = 0, usd = 0, co2_kg = 0;
  std::string basis;
};

}  // namespace

std::string tick_label(double v) {
  if (v == 0 || !std::isfinite(v)) return v == 0 ? "0" : "?";
  const double a = std::fabs(v);
  // Each large scale takes the values that print as 1 to 999 of it. Below 1, plain decimals (0.05, 0.0025): a milli
  // or micro prefix would read as part of the axis's unit ("2.5m h").
  static const std::pair<double, const char*> kLarge[] = {{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}, {1, ""}};
  for (const auto& [scale, suffix] : kLarge)
    if (a >= scale * 0.9995) return num(v / scale, "%.3g") + suffix;
  if (a >= 0.00995) return num(v, "%.3g");
  if (a < 1e-12) return "0";                                             // rounding noise around zero on an axis
  const int decimals = static_cast<int>(std::ceil(-std::log10(a))) + 1;  // two significant digits
  std::string text = num(v, ("%." + std::to_string(decimals) + "f").c_str());
  while (text.back() == '0') text.pop_back();
  return text;
}

AxisTicks axis_ticks(double lo, double hi, int max_intervals) {
  if (!std::isfinite(lo) || !std::isfinite(hi)) lo = 0, hi = 1;
  if (lo > hi) std::swap(lo, hi);
  if (hi == lo) {  // one value: a range around it (a tenth of it, or 1 around zero)
    const double half = lo == 0 ? 1 : std::fabs(lo) * 0.1;
    lo -= half, hi += half;
  }
  max_intervals = std::max(2, max_intervals);
  const double magnitude = std::pow(10.0, std::floor(std::log10((hi - lo) / max_intervals)));
  AxisTicks t;
  long long first = 0, last = 0;
  for (double m : {1.0, 2.0, 5.0, 10.0, 20.0}) {
    t.step = m * magnitude;
    // A relative tolerance: a data extreme a rounding error past a tick does not add an interval.
    const double slack = 1e-9 * t.step;
    first = static_cast<long long>(std::floor((lo + slack) / t.step));
    last = static_cast<long long>(std::ceil((hi - slack) / t.step));
    if (last - first <= max_intervals) break;
  }
  if (last == first) ++last;
  t.lo = static_cast<double>(first) * t.step, t.hi = static_cast<double>(last) * t.step;
  // One scale and one number of decimals for the whole axis, from its largest tick and its step.
  const double largest = std::max(std::fabs(t.lo), std::fabs(t.hi));
  double scale = 1;
  const char* suffix = "";
  static const std::pair<double, const char*> kLarge[] = {{1e12, "T"}, {1e9, "G"}, {1e6, "M"}, {1e3, "k"}};
  for (const auto& [s, name] : kLarge)
    if (largest >= s) {
      scale = s, suffix = name;
      break;
    }
  const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(t.step / scale) + 1e-9)));
  const std::string format = "%." + std::to_string(decimals) + "f";
  for (long long k = first; k <= last; ++k) {
    const double v = static_cast<double>(k) * t.step;
    t.values.push_back(v);
    t.labels.push_back(k == 0 ? "0" : num(v / scale, format.c_str()) + suffix);
  }
  return t;
}

std::string quantity(double v, const std::string& unit) {
  if (unit == "h") return duration_text(v * 3600);
  if (unit == "Wh" || unit == "kWh") return energy_text(unit == "kWh" ? v : v / 1000);
  if (unit == "USD") return usd_text(v);
  return readable(v) + " " + unit;
}

namespace {

// The unit a time axis reads best in for values up to `longest_seconds`: seconds, minutes or hours.
struct TimeUnit {
  double seconds = 1;
  std::string name;
};
TimeUnit time_unit(double longest_seconds) {
  if (longest_seconds < 120) return {1, "s"};
  if (longest_seconds < 120 * 60) return {60, "min"};
  return {3600, "h"};
}

}  // namespace

namespace {
// An inference run (`joule bench infer --out DIR`): inference.json and no training summary.
bool is_inference_run(const std::string& run_dir) {
  std::error_code ec;
  return !inference_run_file(run_dir).empty() && !fs::exists(fs::path(run_dir) / "summary.json", ec);
}
}  // namespace

std::string run_summary(const std::string& run_dir, bool json) {
  if (is_inference_run(run_dir)) return inference_summary(run_dir, json);
  const cost::RunSummary s = cost::read_run_summary(run_dir);
  if (json) return s.to_json().dump(2) + "\n";  // summary.json's keys, as this joule writes them
  std::string note;
  try {  // an archived or read-only run is still shown; only the CSV is not rewritten
    write_file_atomically((fs::path(run_dir) / "emissions.csv").string(), cost::emissions_csv(s));
  } catch (const IoError& e) {
    note = "note: emissions.csv not rewritten: " + std::string(e.what()) + "\n";
  }
  return cost::summary_table(s) + note;
}

namespace {

// The training charts' series: loss and masked-LM accuracy over sequences (train and eval), throughput over time.
struct TrainingSeries {
  Series loss{"train loss", "#386cb0", {}}, eval_loss{"eval loss", "#d95f02", {}, true};
  Series acc{"train masked-LM accuracy", "#386cb0", {}}, eval_acc{"eval masked-LM accuracy", "#d95f02", {}, true};
  Series rate{"seq/s", "#1b9e77", {}};
  TimeUnit rate_time;
};

TrainingSeries training_series(const cost::RunSummary& s, const cost::MetricsHistory& history) {
  TrainingSeries t;
  const int64_t global_batch = std::max<int64_t>(1, s.workload.global_batch);
  for (const cost::TrainPoint& r : history.train) {
    t.loss.points.push_back({r.sequences, r.loss});
    t.acc.points.push_back({r.sequences, r.mlm_acc});
    t.rate.points.push_back({r.wall_s, r.seq_per_s});
  }
  t.rate_time = time_unit(t.rate.points.empty() ? 0 : t.rate.points.back().first);
  for (auto& point : t.rate.points) point.first /= t.rate_time.seconds;
  for (const cost::EvalPoint& r : history.eval) {
    // Older records lack the sequences: a step was global_batch of them then (no packed rows).
    const double at = r.sequences >= 0 ? r.sequences : static_cast<double>(r.step * global_batch);
    t.eval_loss.points.push_back({at, r.eval.loss});
    t.eval_acc.points.push_back({at, r.eval.mlm_accuracy});
  }
  return t;
}

// Energy by component, stacked by source, in Wh.
std::vector<Bar> energy_bars(const cost::EnergyTotals& energy) {
  std::vector<Bar> bars;
  for (int c = 0; c < cost::kComponents; ++c) {
    const auto comp = static_cast<cost::Component>(c);
    if (energy.component(comp) <= 0) continue;
    Bar b{cost::component_name(comp), {}};
    for (int k = 0; k < cost::kSources; ++k)
      if (const double j = energy.at(comp, static_cast<cost::Source>(k)); j > 0)
        b.parts.push_back({cost::source_name(static_cast<cost::Source>(k)), j / 3600.0});
    bars.push_back(b);
  }
  return bars;
}

// The projection's history as a chart: predicted wall time for the run's target against the actual one.
std::string projection_chart(const cost::RunSummary& s) {
  Series predicted{"projected wall time for the target", "#7570b3", {}}, actual{"actual wall time", "#666", {}};
  const double billed_wall_s = s.ledger.wall_s();
  double longest = billed_wall_s;
  for (const cost::ProjectionPoint& p : s.ledger.history) longest = std::max(longest, p.target_wall_s);
  const TimeUnit unit = time_unit(longest);
  for (const cost::ProjectionPoint& p : s.ledger.history)
    predicted.points.push_back({static_cast<double>(p.step), p.target_wall_s / unit.seconds});
  if (!predicted.points.empty() && s.status == "finished")
    actual.points = {{predicted.points.front().first, billed_wall_s / unit.seconds},
                     {predicted.points.back().first, billed_wall_s / unit.seconds}};
  return line_chart("Projection history: wall time for the run's target", "step", "wall time (" + unit.name + ")",
                    {predicted, actual});
}

// This run's workload (model, sequence length, a full pretraining's sequences) predicted on each accelerator profile
// by the cluster model, and the run's own measured rates projected to it as the last row.
std::vector<ProfileEstimate> workload_estimates(const cost::RunSummary& s, const std::string& run_dir,
                                                const std::string& config_dir, int nodes,
                                                std::vector<std::string>& skipped) {
  const cost::WorkloadInfo& w = s.workload;
  sim::Workload workload;
  workload.model = models::BertConfig::from_json_file((fs::path(run_dir) / "model_config.json").string());
  workload.seq_len = w.seq_len;
  workload.max_predictions = w.max_predictions;
  workload.global_batch = 65536;  // NVIDIA's phase-1 recipe
  workload.sequences = static_cast<double>(s.full_pretraining.sequences);
  std::vector<ProfileEstimate> rows;
  const std::string hardware = (fs::path(config_dir) / "hardware").string();
  for (const std::string& name : cost::list_instance_profiles(hardware)) {
    try {
      const cost::InstanceProfile p = cost::load_instance_profile(name, hardware);
      if (p.device_kind == "cpu") continue;  // the measured row stands for the CPU host
      const sim::ClusterModel m(p, (fs::path(config_dir) / "models").string());
      const sim::StepPrediction r = m.predict(workload, nodes, s.instance().region.g_per_kwh);
      rows.push_back(
          {p.name, workload.dtype, nodes, r.seq_per_s, r.hours, r.kwh, r.usd, r.co2_kg,
           "cluster model: " + m.efficiency_basis() + ", exposed comm " + num(r.exposed_comm_s, "%.3g") + " s/step"});
    } catch (const std::exception& e) {
      skipped.push_back(name + ": " + e.what());
    }
  }
  const cost::Projection& full = s.full_pretraining;
  rows.push_back({s.instance().instance + " (this run, measured)", w.dtype, static_cast<int>(s.nodes), s.seq_per_s,
                  full.wall_s / 3600.0, full.kwh, full.usd, full.co2_kg, "measured rates of this run"});
  return rows;
}

// The estimates as a table and three bar charts (hours, energy, cost).
std::string workload_section(const std::vector<ProfileEstimate>& rows) {
  std::vector<Bar> hours_bars, kwh_bars, usd_bars;
  std::ostringstream table;
  table << "<table><tr><th>instance</th><th>precision</th><th>nodes</th><th>seq/s</th><th>hours</th><th>kWh "
           "(facility)</th><th>USD</th><th>kg CO2</th>"
        << "<th>basis</th></tr>\n";
  for (const ProfileEstimate& e : rows) {
    table << "<tr><td>" << esc(e.instance) << "</td><td>" << esc(e.precision) << "</td><td>" << e.nodes << "</td><td>"
          << grouped(e.seq_per_s) << "</td><td>" << fig(e.hours) << "</td><td>" << fig(e.kwh) << "</td><td>"
          << fig(e.usd) << "</td><td>" << fig(e.co2_kg) << "</td><td>" << esc(e.basis) << "</td></tr>\n";
    const std::string label = e.instance + " x" + std::to_string(e.nodes);
    hours_bars.push_back({label, {{"hours", e.hours}}});
    kwh_bars.push_back({label, {{"kWh", e.kwh}}});
    usd_bars.push_back({label, {{"USD", e.usd}}});
  }
  table << "</table>\n";
  return table.str() + "<div class=\"charts\">\n" + bar_chart("Hours for the workload", "h", hours_bars) +
         bar_chart("Energy for the workload (facility)", "kWh", kwh_bars) +
         bar_chart("Cost for the workload", "USD", usd_bars) + "</div>\n";
}

// The page's head and the run's key figures as a two-column table.
std::string run_overview(const cost::RunSummary& s, const std::string& run_dir) {
  const cost::Spent spent = s.ledger.totals();
  const cost::CostSettings& inst = s.instance();
  const cost::Projection& full = s.full_pretraining;
  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>joule run " << esc(s.ledger.run_id)
    << "</title>\n"
    << "<style>body{font-family:sans-serif;margin:24px;color:#222;max-width:1340px}h1{font-size:20px}h2{font-size:16px;"
       "margin-top:28px}"
    << "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}"
    << ".charts{display:flex;flex-wrap:wrap;gap:16px}.note{color:#666;font-size:12px}</style></head><body>\n"
    << "<h1>joule training-cost report</h1>\n<p>run <code>" << esc(s.ledger.run_id) << "</code> in <code>"
    << esc(run_dir) << "</code>: " << esc(s.status) << "</p>\n<table>\n";
  auto kv = [&](const std::string& k, const std::string& v) {
    h << "<tr><th>" << esc(k) << "</th><td>" << esc(v) << "</td></tr>\n";
  };
  kv("sequences",
     grouped(static_cast<double>(s.sequences)) + " in " + grouped(static_cast<double>(s.steps)) + " steps");
  kv("ranks / nodes", std::to_string(s.ranks) + " / " + std::to_string(s.nodes));
  kv("wall time", cost::duration_text(s.wall_s) + " (billed " + cost::duration_text(s.ledger.wall_s()) + ", " +
                      std::to_string(s.segments) + " segment(s))");
  kv("throughput", readable(s.seq_per_s, 4) + " seq/s");
  if (s.target_accuracy) kv("target accuracy", s.target_accuracy->text());
  kv("energy (facility)", energy_text(spent.facility_kwh) +
                              ", source: " + cost::energy_json(s.ledger.energy())["source"].get<std::string>());
  kv("cost", usd_text(spent.usd) + " (" + inst.instance + ", " + usd_text(inst.usd_per_hour) + "/h, " +
                 inst.price_source + ")");
  kv("CO2", mass_text(spent.co2_kg) + " at " + readable(inst.region.g_per_kwh) + " g/kWh (" + inst.grid_source + ")");
  kv("projected for 450M sequences",
     cost::duration_text(full.wall_s) + ", " + energy_text(full.kwh) + ", " + usd_text(full.usd) + " for " +
         s.workload.model +
         " on this cluster (measured rates; the table below predicts this workload on each instance profile)");
  h << "</table>\n";
  return h.str();
}

}  // namespace

// This run's and `other`'s held-out masked-LM accuracy over sequences and over wall time, each run named with how its
// rows were filled (packed or padded): two runs of one recipe compared, e.g. packed against padded rows.
std::string comparison_section(const cost::RunSummary& s, const cost::MetricsHistory& history,
                               const std::string& run_dir, const std::string& other) {
  const cost::RunSummary o = cost::read_run_summary(other);
  const cost::MetricsHistory other_history = cost::read_metrics_history(other);
  auto name = [](const cost::RunSummary& r, const std::string& dir) {
    return fs::path(dir).lexically_normal().filename().string() + " (" + (r.workload.pack > 0 ? "packed" : "padded") +
           ", " + r.workload.dtype + ")";
  };
  Series by_sequences[2] = {{name(s, run_dir), "#386cb0", {}}, {name(o, other), "#d95f02", {}}};
  Series by_time[2] = {by_sequences[0], by_sequences[1]};
  const cost::MetricsHistory* histories[2] = {&history, &other_history};
  double longest = 0;
  for (int k = 0; k < 2; ++k)
    for (const cost::EvalPoint& e : histories[k]->eval)
      if (e.sequences >= 0 && e.wall_s >= 0) {
        by_sequences[k].points.push_back({e.sequences, e.eval.mlm_accuracy});
        by_time[k].points.push_back({e.wall_s, e.eval.mlm_accuracy});
        longest = std::max(longest, e.wall_s);
      }
  const TimeUnit unit = time_unit(longest);
  for (Series& series : by_time)
    for (auto& point : series.points) point.first /= unit.seconds;
  std::ostringstream h;
  h << "<h2>Compared with " << esc(other)
    << "</h2>\n<p class=\"note\">Held-out masked-LM accuracy of both runs at each "
    << "eval (the runs' own eval sets), over the sequences trained and over training wall time.</p>\n"
    << "<div class=\"charts\">\n"
    << line_chart("Held-out masked-LM accuracy over sequences", "sequences", "accuracy",
                  {by_sequences[0], by_sequences[1]})
    << line_chart("Held-out masked-LM accuracy over wall time", "wall time (" + unit.name + ")", "accuracy",
                  {by_time[0], by_time[1]})
    << "</div>\n";
  return h.str();
}

std::string write_report(const std::string& run_dir, const std::string& out, const std::string& config_dir, int nodes,
                         const std::string& compare) {
  if (is_inference_run(run_dir)) return write_inference_report(run_dir, out, config_dir);
  const cost::RunSummary s = cost::read_run_summary(run_dir);
  const cost::MetricsHistory history = cost::read_metrics_history(run_dir);
  const TrainingSeries t = training_series(s, history);
  std::vector<std::string> skipped;
  const std::vector<ProfileEstimate> estimates = workload_estimates(s, run_dir, config_dir, nodes, skipped);
  std::ostringstream h;
  h << run_overview(s, run_dir) << "<h2>Training</h2>\n<div class=\"charts\">\n"
    << line_chart("Loss over sequences", "sequences", "loss", {t.loss, t.eval_loss})
    << line_chart("Masked-LM accuracy over sequences", "sequences", "accuracy", {t.acc, t.eval_acc})
    << line_chart("Throughput over time", "wall time (" + t.rate_time.name + ")", "seq/s", {t.rate}) << "</div>\n"
    << (compare.empty() ? std::string() : comparison_section(s, history, run_dir, compare))
    << "<h2>Energy</h2>\n<div class=\"charts\">\n"
    << bar_chart("Energy by component and source (IT equipment)", "Wh", energy_bars(s.ledger.energy()))
    << projection_chart(s) << "</div>\n"
    << "<h2>This workload on each instance profile</h2>\n<p class=\"note\">"
    << grouped(static_cast<double>(s.full_pretraining.sequences)) << " sequences of " << s.workload.seq_len
    << " tokens, model " << esc(s.workload.model) << ", " << nodes
    << " nodes, global batch 65,536, bf16: the cluster performance model of <code>joule plan</code> (compute "
       "calibrated on each "
    << "profile's single-node figure, hierarchical all-reduce of the gradient buckets, see VALIDATION.md). The last "
       "row projects this "
    << "run's measured rates.</p>\n"
    << workload_section(estimates);
  for (const std::string& n : s.notices) h << "<p class=\"note\">note: " << esc(n) << "</p>\n";
  for (const auto& n : skipped) h << "<p class=\"note\">profile skipped: " << esc(n) << "</p>\n";
  h << "</body></html>\n";

  const std::string path = out.empty() ? (fs::path(run_dir) / "report.html").string() : out;
  write_file_atomically(path, h.str());
  if (history.torn_tail_bytes > 0)
    return path + "\nnote: " + run_dir + "/metrics.jsonl ends in a partial record of " +
           std::to_string(history.torn_tail_bytes) +
           " byte(s) (the run was killed while writing it; --resume auto cuts it): left out of the charts";
  return path;
}

}  // namespace joule::tools
