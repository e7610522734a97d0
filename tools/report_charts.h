// The HTML reports' pieces (`joule report` of a training run and of an inference run): escaping, numbers for tables,
// and self-contained SVG charts (a line chart with 1-2-5 ticks and a legend, a horizontal stacked bar chart).
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace joule::tools::html {

std::string esc(const std::string& s);          // &, <, >, " as entities
std::string num(double v, const char* format);  // printf-formatted
// A figure for the tables: four significant digits, never in exponent form for large values (12345, not 1.234e+04).
std::string fig(double v);

struct Series {
  std::string name, color;
  std::vector<std::pair<double, double>> points;
  bool dots = false;  // points, not a line
};

// An SVG line chart: the title, a legend row under it, the plot with 1-2-5 ticks on each axis (axis_ticks), axis names.
// Nothing is drawn over the title and no label leaves the canvas (tests/e2e/train_resume.sh checks it in Chromium).
std::string line_chart(const std::string& title, const std::string& x_label, const std::string& y_label,
                       const std::vector<Series>& series);

struct Bar {
  std::string label;
  std::vector<std::pair<std::string, double>> parts;  // stacked, by name
};

// A horizontal stacked bar chart; colours by part name, values shown as `quantity(v, unit)`.
std::string bar_chart(const std::string& title, const std::string& unit, const std::vector<Bar>& bars);

}  // namespace joule::tools::html
