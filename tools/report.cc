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

#include <nlohmann/json.hpp>

#include "models/flops.h"
#include "trainer/cost/accounting.h"
#include "trainer/sim/perf_model.h"
#include "launch/error.h"

namespace joule::tools {
namespace fs = std::filesystem;
using nlohmann::json;
namespace {

struct ProfileEstimate {
  std::string instance;
  int nodes = 0;
  double seq_per_s = 0, hours = 0, kwh = 0, usd = 0, co2_kg = 0;
  std::string basis;
};

json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) throw joule::IoError(path.string() + ": cannot open (is this a joule run directory?)", "give the run directory of a joule train run (it holds summary.json)");
  try {
    return json::parse(in);
  } catch (const std::exception& e) {
    throw joule::Error(path.string() + ": not valid JSON: " + e.what(), "the file is damaged or half-written: rerun `joule summary` on a complete run");
  }
}

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '&': o += "&amp;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string num(double v, const char* f = "%.4g") {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

struct Series {
  std::string name, color;
  std::vector<std::pair<double, double>> points;
  bool dots = false;
};

// An SVG line chart with axes, five ticks per axis and a legend.
std::string line_chart(const std::string& title, const std::string& x_label, const std::string& y_label, const std::vector<Series>& series) {
  const double w = 640, h = 300, left = 64, right = 16, top = 34, bottom = 44;
  double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
  for (const Series& s : series)
    for (auto [x, y] : s.points) {
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h << "\" viewBox=\"0 0 " << w << " " << h
    << "\" role=\"img\" aria-label=\"" << esc(title) << "\">\n<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n"
    << "<text x=\"10\" y=\"20\" font-size=\"14\" font-weight=\"bold\">" << esc(title) << "</text>\n";
  if (x0 > x1) return o.str() + "<text x=\"" + num(left) + "\" y=\"80\" font-size=\"12\">no data</text>\n</svg>\n";
  if (x1 == x0) x1 = x0 + 1;
  if (y1 == y0) y1 = y0 + std::max(1e-9, std::fabs(y0) * 0.1);
  const double pad = (y1 - y0) * 0.05;
  y0 -= pad, y1 += pad;
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * (w - left - right); };
  auto py = [&](double y) { return h - bottom - (y - y0) / (y1 - y0) * (h - top - bottom); };
  o << "<g stroke=\"#999\" stroke-width=\"1\"><line x1=\"" << left << "\" y1=\"" << h - bottom << "\" x2=\"" << w - right << "\" y2=\"" << h - bottom
    << "\"/><line x1=\"" << left << "\" y1=\"" << top << "\" x2=\"" << left << "\" y2=\"" << h - bottom << "\"/></g>\n<g font-size=\"10\" fill=\"#444\">\n";
  for (int i = 0; i <= 4; ++i) {
    const double xv = x0 + (x1 - x0) * i / 4, yv = y0 + (y1 - y0) * i / 4;
    o << "<text x=\"" << px(xv) << "\" y=\"" << h - bottom + 14 << "\" text-anchor=\"middle\">" << num(xv, "%.3g") << "</text>"
      << "<text x=\"" << left - 6 << "\" y=\"" << py(yv) + 3 << "\" text-anchor=\"end\">" << num(yv, "%.3g") << "</text>"
      << "<line x1=\"" << left << "\" y1=\"" << py(yv) << "\" x2=\"" << w - right << "\" y2=\"" << py(yv) << "\" stroke=\"#eee\"/>\n";
  }
  o << "<text x=\"" << (left + w - right) / 2 << "\" y=\"" << h - 8 << "\" text-anchor=\"middle\" font-size=\"11\">" << esc(x_label)
    << "</text><text transform=\"translate(14," << (top + h - bottom) / 2 << ") rotate(-90)\" text-anchor=\"middle\" font-size=\"11\">"
    << esc(y_label) << "</text>\n</g>\n";
  int k = 0;
  for (const Series& s : series) {
    if (s.dots) {
      for (auto [x, y] : s.points) o << "<circle cx=\"" << px(x) << "\" cy=\"" << py(y) << "\" r=\"3.5\" fill=\"" << s.color << "\"/>";
    } else {
      o << "<polyline fill=\"none\" stroke=\"" << s.color << "\" stroke-width=\"2\" points=\"";
      for (auto [x, y] : s.points) o << px(x) << "," << py(y) << " ";
      o << "\"/>";
    }
    o << "\n<rect x=\"" << w - right - 250 << "\" y=\"" << 10 + 14 * k << "\" width=\"10\" height=\"10\" fill=\"" << s.color << "\"/><text x=\""
      << w - right - 235 << "\" y=\"" << 19 + 14 * k << "\" font-size=\"11\">" << esc(s.name) << "</text>\n";
    ++k;
  }
  return o.str() + "</svg>\n";
}

struct Bar {
  std::string label;
  std::vector<std::pair<std::string, double>> parts;  // stacked, by name
};

// A horizontal stacked bar chart; colours by part name.
std::string bar_chart(const std::string& title, const std::string& unit, const std::vector<Bar>& bars) {
  static const std::map<std::string, std::string> colours = {{"rapl", "#1b9e77"}, {"nvml", "#7570b3"}, {"neuron", "#e7298a"},
                                                            {"model", "#d95f02"}, {"hours", "#386cb0"}, {"kWh", "#1b9e77"},
                                                            {"USD", "#d95f02"}};
  const double w = 640, left = 230, right = 90, row = 26, top = 36;
  const double h = top + row * std::max<size_t>(1, bars.size()) + 30;
  double max_total = 0;
  for (const Bar& b : bars) {
    double t = 0;
    for (const auto& p : b.parts) t += p.second;
    max_total = std::max(max_total, t);
  }
  if (max_total <= 0) max_total = 1;
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h << "\" viewBox=\"0 0 " << w << " " << h
    << "\" role=\"img\" aria-label=\"" << esc(title) << "\">\n<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n<text x=\"10\" y=\"20\" "
    << "font-size=\"14\" font-weight=\"bold\">" << esc(title) << "</text>\n";
  std::map<std::string, bool> legend;
  for (size_t i = 0; i < bars.size(); ++i) {
    const double y = top + row * i;
    o << "<text x=\"" << left - 8 << "\" y=\"" << y + 15 << "\" text-anchor=\"end\" font-size=\"11\">" << esc(bars[i].label) << "</text>";
    double x = left, total = 0;
    for (const auto& [name, v] : bars[i].parts) {
      const double bw = v / max_total * (w - left - right);
      const auto c = colours.count(name) ? colours.at(name) : "#666";
      o << "<rect x=\"" << x << "\" y=\"" << y + 3 << "\" width=\"" << std::max(0.5, bw) << "\" height=\"" << row - 8 << "\" fill=\"" << c
        << "\"><title>" << esc(name) << ": " << num(v) << " " << esc(unit) << "</title></rect>";
      x += bw;
      total += v;
      legend[name] = true;
    }
    o << "<text x=\"" << x + 6 << "\" y=\"" << y + 15 << "\" font-size=\"11\">" << num(total) << " " << esc(unit) << "</text>\n";
  }
  int k = 0;
  for (const auto& [name, unused] : legend) {
    (void)unused;
    const auto c = colours.count(name) ? colours.at(name) : "#666";
    o << "<rect x=\"" << left + 90 * k << "\" y=\"" << h - 18 << "\" width=\"10\" height=\"10\" fill=\"" << c << "\"/><text x=\""
      << left + 90 * k + 14 << "\" y=\"" << h - 9 << "\" font-size=\"11\">" << esc(name) << "</text>";
    ++k;
  }
  return o.str() + "\n</svg>\n";
}

}  // namespace

std::string run_summary(const std::string& run_dir) {
  json s = read_json(fs::path(run_dir) / "summary.json");
  s["run_dir"] = run_dir;
  std::ofstream(fs::path(run_dir) / "emissions.csv") << trainer::emissions_csv(s);
  return trainer::summary_table(s);
}

std::string write_report(const std::string& run_dir, const std::string& out, const std::string& config_dir, int nodes) {
  const json s = read_json(fs::path(run_dir) / "summary.json");
  // metrics.jsonl: training rows (with "loss") and eval rows (with "eval"); a step logged twice (work redone
  // after a crash) keeps its last row.
  std::map<int64_t, json> train_rows, eval_rows;
  {
    std::ifstream in(fs::path(run_dir) / "metrics.jsonl");
    if (!in) throw joule::IoError((fs::path(run_dir) / "metrics.jsonl").string() + ": cannot open");
    int line_no = 0;
    for (std::string line; std::getline(in, line);) {
      ++line_no;
      if (line.empty()) continue;
      json j;
      try {
        j = json::parse(line);
      } catch (const std::exception&) {
        throw joule::Error((fs::path(run_dir) / "metrics.jsonl").string() + ":" + std::to_string(line_no) + ": not valid JSON", "the file is damaged: remove the broken line or rerun");
      }
      (j.contains("eval") ? eval_rows : train_rows)[j.value("step", 0LL)] = j;
    }
  }
  const int64_t global_batch = s.at("workload").value("global_batch", 1LL);
  Series loss{"train loss", "#386cb0", {}}, eval_loss{"eval loss", "#d95f02", {}, true};
  Series acc{"train masked-LM accuracy", "#386cb0", {}}, eval_acc{"eval masked-LM accuracy", "#d95f02", {}, true};
  Series rate{"seq/s", "#1b9e77", {}};
  for (const auto& [step, r] : train_rows) {
    const double seqs = r.value("sequences", 0.0);
    loss.points.push_back({seqs, r.value("loss", 0.0)});
    acc.points.push_back({seqs, r.value("mlm_acc", 0.0)});
    rate.points.push_back({r.value("wall_s", 0.0) / 60.0, r.value("seq_per_s", 0.0)});
  }
  for (const auto& [step, r] : eval_rows) {
    eval_loss.points.push_back({static_cast<double>(step * global_batch), r["eval"].value("loss", 0.0)});
    eval_acc.points.push_back({static_cast<double>(step * global_batch), r["eval"].value("mlm_accuracy", 0.0)});
  }

  // Energy by component, stacked by source, in Wh.
  std::vector<Bar> energy_bars;
  for (const auto& [comp, v] : s.at("energy").at("components").items()) {
    Bar b{comp, {}};
    for (const auto& [src, kwh] : v.at("sources").items()) b.parts.push_back({src, kwh.get<double>() * 1000.0});
    energy_bars.push_back(b);
  }

  // The projection's history: predicted wall time for the run's target against the actual one.
  Series predicted{"projected wall time for the target", "#7570b3", {}}, actual{"actual wall time", "#666", {}};
  for (const json& p : s.at("projection").value("history", json::array()))
    predicted.points.push_back({p.value("step", 0.0), p.value("target_wall_s", 0.0) / 60.0});
  if (!predicted.points.empty() && s.value("status", "") == "finished") {
    actual.points = {{predicted.points.front().first, s.value("billed_wall_s", 0.0) / 60.0},
                     {predicted.points.back().first, s.value("billed_wall_s", 0.0) / 60.0}};
  }

  // This run's workload (model, sequence length, the 450M-sequence target) on each instance profile.
  const json& w = s.at("workload");
  const models::BertConfig model = models::BertConfig::from_json_file((fs::path(run_dir) / "model_config.json").string());
  const double target = s.at("projection").at("card_450M").value("sequences", 450e6);
  const double grid = s.at("instance").value("grid_g_per_kwh", 475.0);
  std::vector<ProfileEstimate> estimates;
  std::vector<std::string> skipped;
  trainer::Workload workload;
  workload.model = model;
  workload.seq_len = w.value("seq_len", 128LL);
  workload.max_predictions = w.value("max_predictions", 20LL);
  workload.global_batch = 65536;  // the card's recipe
  workload.sequences = target;
  for (const std::string& name : trainer::list_instance_profiles((fs::path(config_dir) / "hardware").string())) {
    try {
      const trainer::InstanceProfile p = trainer::load_instance_profile(name, (fs::path(config_dir) / "hardware").string());
      if (p.device_kind == "cpu") continue;  // the measured row stands for the CPU host
      const trainer::ClusterModel m(p, (fs::path(config_dir) / "models").string());
      const trainer::StepPrediction r = m.predict(workload, nodes, {}, grid);
      estimates.push_back({p.name, nodes, r.seq_per_s, r.hours, r.kwh, r.usd, r.co2_kg,
                           "cluster model: " + m.efficiency_basis() + ", exposed comm " + num(r.exposed_comm_s, "%.3g") + " s/step"});
    } catch (const std::exception& e) {
      skipped.push_back(name + ": " + e.what());
    }
  }
  const json& card = s.at("projection").at("card_450M");
  ProfileEstimate measured;
  measured.instance = s.at("instance").value("instance", "?") + " (this run, measured)";
  measured.nodes = s.value("nodes", 1);
  measured.seq_per_s = s.value("seq_per_s", 0.0);
  measured.hours = card.value("wall_s", 0.0) / 3600.0;
  measured.kwh = card.value("kwh", 0.0);
  measured.usd = card.value("usd", 0.0);
  measured.co2_kg = card.value("co2_kg", 0.0);
  measured.basis = "measured rates of this run";
  std::vector<Bar> hours_bars, kwh_bars, usd_bars;
  std::ostringstream table;
  table << "<table><tr><th>instance</th><th>nodes</th><th>seq/s</th><th>hours</th><th>kWh (facility)</th><th>USD</th><th>kg CO2</th>"
        << "<th>basis</th></tr>\n";
  std::vector<ProfileEstimate> rows = estimates;
  rows.push_back(measured);
  for (const ProfileEstimate& e : rows) {
    table << "<tr><td>" << esc(e.instance) << "</td><td>" << e.nodes << "</td><td>" << num(e.seq_per_s, "%.0f") << "</td><td>" << num(e.hours, "%.3g")
          << "</td><td>" << num(e.kwh, "%.4g") << "</td><td>" << num(e.usd, "%.4g") << "</td><td>" << num(e.co2_kg, "%.4g") << "</td><td>"
          << esc(e.basis) << "</td></tr>\n";
    const std::string label = e.instance.substr(0, 34) + " x" + std::to_string(e.nodes);
    hours_bars.push_back({label, {{"hours", e.hours}}});
    kwh_bars.push_back({label, {{"kWh", e.kwh}}});
    usd_bars.push_back({label, {{"USD", e.usd}}});
  }
  table << "</table>\n";

  std::ostringstream h;
  h << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>joule run " << esc(s.value("run_id", "")) << "</title>\n"
    << "<style>body{font-family:sans-serif;margin:24px;color:#222;max-width:1340px}h1{font-size:20px}h2{font-size:16px;margin-top:28px}"
    << "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:4px 8px;text-align:left}"
    << ".charts{display:flex;flex-wrap:wrap;gap:16px}.note{color:#666;font-size:12px}</style></head><body>\n"
    << "<h1>joule training-cost report</h1>\n<p>run <code>" << esc(s.value("run_id", "")) << "</code> in <code>" << esc(run_dir) << "</code>: "
    << esc(s.value("status", "")) << "</p>\n<table>\n";
  auto kv = [&](const std::string& k, const std::string& v) { h << "<tr><th>" << esc(k) << "</th><td>" << esc(v) << "</td></tr>\n"; };
  kv("sequences", std::to_string(s.value("sequences", 0LL)) + " in " + std::to_string(s.value("steps", 0LL)) + " steps");
  kv("ranks / nodes", std::to_string(s.value("ranks", 0)) + " / " + std::to_string(s.value("nodes", 0)));
  kv("wall time", trainer::duration_text(s.value("wall_s", 0.0)) + " (billed " + trainer::duration_text(s.value("billed_wall_s", 0.0)) + ", " +
                      std::to_string(s.value("segments", 1)) + " segment(s))");
  kv("throughput", num(s.value("seq_per_s", 0.0), "%.2f") + " seq/s");
  kv("energy (facility)", num(s.value("energy_kwh", 0.0)) + " kWh, source: " + s.value("energy_source", ""));
  kv("cost", "USD " + num(s.value("cost_usd", 0.0)) + " (" + s.at("instance").value("instance", "") + ", USD " +
                 num(s.at("instance").value("usd_per_hour", 0.0)) + "/h, " + s.at("instance").value("price_source", "") + ")");
  kv("CO2", num(s.value("co2_kg", 0.0)) + " kg at " + num(grid) + " g/kWh (" + s.at("instance").value("grid_source", "") + ")");
  kv("projected for 450M sequences", trainer::duration_text(card.value("wall_s", 0.0)) + ", " + num(card.value("kwh", 0.0)) + " kWh, USD " +
                                         num(card.value("usd", 0.0)) + " on this cluster");
  h << "</table>\n<h2>Training</h2>\n<div class=\"charts\">\n"
    << line_chart("Loss over sequences", "sequences", "loss", {loss, eval_loss})
    << line_chart("Masked-LM accuracy over sequences", "sequences", "accuracy", {acc, eval_acc})
    << line_chart("Throughput over time", "wall time (min)", "seq/s", {rate}) << "</div>\n<h2>Energy</h2>\n<div class=\"charts\">\n"
    << bar_chart("Energy by component and source (IT equipment)", "Wh", energy_bars)
    << line_chart("Projection history: wall time for the run's target", "step", "minutes", {predicted, actual}) << "</div>\n"
    << "<h2>This workload on each instance profile</h2>\n<p class=\"note\">" << num(target, "%.3g") << " sequences of "
    << w.value("seq_len", 0) << " tokens, model " << esc(w.value("model", "")) << ", " << nodes
    << " nodes, global batch 65,536, bf16: the cluster performance model of <code>joule plan</code> (compute calibrated on each "
    << "profile's single-node figure, hierarchical all-reduce of the gradient buckets, see VALIDATION.md). The last row projects this "
    << "run's measured rates.</p>\n"
    << table.str() << "<div class=\"charts\">\n"
    << bar_chart("Hours for the workload", "h", hours_bars) << bar_chart("Energy for the workload (facility)", "kWh", kwh_bars)
    << bar_chart("Cost for the workload", "USD", usd_bars) << "</div>\n";
  for (const auto& n : s.value("notices", json::array())) h << "<p class=\"note\">note: " << esc(n.get<std::string>()) << "</p>\n";
  for (const auto& n : skipped) h << "<p class=\"note\">profile skipped: " << esc(n) << "</p>\n";
  h << "</body></html>\n";

  const std::string path = out.empty() ? (fs::path(run_dir) / "report.html").string() : out;
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    if (!f) throw joule::IoError(tmp + ": cannot write");
    f << h.str();
  }
  fs::rename(tmp, path);
  return path;
}

}  // namespace joule::tools
