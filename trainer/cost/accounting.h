// Energy, cost and carbon accounting for a run: cost = instances x hours x price; facility energy = measured
// (or modelled) IT energy x PUE; CO2 = facility kWh x grid intensity. The ledger lists every segment of a run
// (one per start or resume), travels in checkpoints, and projects the run's target and a full pretraining's 450M
// sequences from measured rates. The summary built from it: trainer/cost/run_summary.h. No LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "launch/util/format.h"
#include "trainer/cost/accounting_options.h"
#include "trainer/cost/energy.h"
#include "trainer/cost/hardware.h"

namespace joule::cost {

// What the run is billed as. Overrides win over the profile; every figure says where it came from.
struct CostSettings {
  std::string instance, instance_file;
  double usd_per_hour = 0;  // per instance
  std::string price_source;
  double pue = 1;
  std::string pue_source;
  GridRegion region;
  std::string grid_source;
};

// `config_dir`: configs/ (hardware/*.toml and grid-intensity.toml).
// Only the billing keys of `options` are read (instance, price_per_hour, pue, region, grid_intensity).
CostSettings resolve_cost_settings(const AccountingOptions& overrides, const std::string& device,
                                   const std::string& config_dir, InstanceProfile* profile_out = nullptr);

struct Spent {
  double it_kwh = 0, facility_kwh = 0, usd = 0, co2_kg = 0, instance_hours = 0;
};
Spent account(const EnergyTotals& energy, double wall_s, int nodes, const CostSettings& cost);

struct Segment {
  int64_t start_step = 0, end_step = 0, sequences = 0;
  double wall_s = 0;
  // The steps after this segment's warm-up: what the run's throughput is measured on. wall_s - timed_s is the
  // segment's own overhead (start-up, warm-up steps, checkpoints, eval). Absent (0) in ledgers of older joules.
  int64_t timed_sequences = 0;
  double timed_s = 0;
  int ranks = 0, nodes = 0;
  std::string started_utc, ended_utc, status = "running", meters;
  CostSettings cost;
  EnergyTotals energy;
  Spent figures() const { return account(energy, wall_s, nodes, cost); }
  // `raw_joules`: the exact joules as well (a checkpoint's ledger); summary.json has kWh by component and source.
  nlohmann::json to_json(bool raw_joules) const;
  static Segment from_json(const nlohmann::json& j, const std::string& where);
};

struct ProjectionPoint {
  int64_t step = 0, sequences = 0;
  double wall_s = 0;                                                            // when it was made
  double target_wall_s = 0, target_kwh = 0, target_usd = 0, target_co2_kg = 0;  // for the run's target
  nlohmann::json to_json() const;
  static ProjectionPoint from_json(const nlohmann::json& j, const std::string& where);
};

// Everything a run has used so far, across resumes. JSON round trip for checkpoints.
struct Ledger {
  std::string run_id, project_name = "joule";
  std::vector<Segment> segments;
  std::vector<ProjectionPoint> history;  // bounded; thinned when full
  Spent totals() const;
  EnergyTotals energy() const;
  double wall_s() const;
  // Every segment's timed steps together: (sequences, seconds). The run's throughput is their ratio.
  std::pair<int64_t, double> timed() const;
  void add_projection(const ProjectionPoint& p);
  nlohmann::json to_json() const;
  nlohmann::json segments_json(bool raw_joules) const;
  nlohmann::json history_json() const;
  // Checked reads naming `where` (the file) and the key: joule::Error.
  static Ledger from_json(const nlohmann::json& j, const std::string& where);
  static Ledger from_parts(const nlohmann::json& segments, const nlohmann::json& history, const std::string& where);
};

std::string new_run_id();    // a random UUID (version 4)
using joule::duration_text;  // launch/util/format.h
std::string utc_now_iso();   // 2026-11-29T19:40:55Z

// Projections from measured rates: `seq_per_s` after warm-up, and the run's average facility power, cost rate and
// CO2 rate (what was spent over the billed wall time `done_wall_s`, start-up included).
struct Projection {
  int64_t sequences = 0;
  double wall_s = 0, kwh = 0, usd = 0, co2_kg = 0;
};
// The run's own target: what was spent so far, plus the sequences still to train at those rates. A run at or
// past its target projects to exactly what it spent.
Projection project_target(int64_t target_sequences, int64_t done_sequences, double done_wall_s, const Spent& done,
                          double seq_per_s);
// A hypothetical target (a full pretraining's 450M sequences) trained from the start at those rates: target / seq_per_s
// of wall time at the run's average power and cost rate. Nothing already spent is added, and no start-up time.
Projection project_hypothetical(int64_t target_sequences, double done_wall_s, const Spent& done, double seq_per_s);

// A metrics row (one metrics.jsonl line) in Prometheus text format: every number as gauge joule_<key>, labelled
// with the run id (node-exporter textfile collector style).
std::string prometheus_text(const nlohmann::json& row, const std::string& run_id);
// summary.json's "energy" object for a total: kWh by component and source, plus the sources in words.
nlohmann::json energy_json(const EnergyTotals& energy);

}  // namespace joule::cost
