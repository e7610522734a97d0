// `joule summary RUN_DIR` and `joule report RUN_DIR`: the training-cost summary again from summary.json, and
// one self-contained HTML file with SVG charts (loss and masked-LM accuracy over sequences, throughput over
// time, energy by component and source, the projection's history, and this run's workload on each instance
// profile through the cluster performance model).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace joule::tools {

// Prints the table and rewrites RUN_DIR/emissions.csv from RUN_DIR/summary.json; returns the table. `json`: the
// summary as JSON instead (summary.json's keys and schema_version, as this joule writes them), nothing rewritten.
std::string run_summary(const std::string& run_dir, bool json = false);

// A chart's tick label: a plain number with a large SI suffix (38.4k, 1.2M), three significant digits at most; below 1
// plain decimals (0.05, 0.0025); never in exponent form, never a milli or micro prefix (it would read as part of the
// axis's unit).
std::string tick_label(double value);

// An axis's ticks: 1-2-5 steps (1, 2 or 5 times a power of ten) that cover [lo, hi] in at most `max_intervals`
// intervals, the axis range widened to the outer ticks, and labels with the same number of decimals along the axis
// (0.2, 0.4, 0.6; 1.5k, 2.0k, 2.5k; zero as "0"), never in exponent form. An empty or one-point range gets a range
// around its value.
struct AxisTicks {
  double lo = 0, hi = 1, step = 1;
  std::vector<double> values;
  std::vector<std::string> labels;
};
AxisTicks axis_ticks(double lo, double hi, int max_intervals = 6);

// A value with its unit, as people read it: hours as h, min or s; energy as Wh, kWh or MWh; "USD 0.0012"; never an SI
// prefix glued to another unit ("4.63m h" is 16.7 s).
std::string quantity(double value, const std::string& unit);

// Writes the report; returns its path (RUN_DIR/report.html unless `out` is given). `compare`: another training run
// whose held-out accuracy is drawn beside this one's, over sequences and over wall time ("" none).
std::string write_report(const std::string& run_dir, const std::string& out, const std::string& config_dir, int nodes,
                         const std::string& compare = "");

}  // namespace joule::tools
