// `joule summary RUN_DIR` and `joule report RUN_DIR`: the training-cost summary again from summary.json, and
// one self-contained HTML file with SVG charts (loss and masked-LM accuracy over sequences, throughput over
// time, energy by component and source, the projection's history, and this run's workload on each instance
// profile through the cluster performance model).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace joule::tools {

// Prints the table and rewrites RUN_DIR/emissions.csv from RUN_DIR/summary.json; returns the table.
std::string run_summary(const std::string& run_dir);

// A chart's tick label: a plain number with an SI suffix (38.4k, 1.2M, 250µ), three significant digits at most,
// never in exponent form.
std::string tick_label(double value);

// Writes the report; returns its path (RUN_DIR/report.html unless `out` is given).
std::string write_report(const std::string& run_dir, const std::string& out, const std::string& config_dir, int nodes);

}  // namespace joule::tools
