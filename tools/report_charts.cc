#include "tools/report_charts.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>

#include "launch/util/format.h"
#include "tools/report.h"

namespace joule::tools::html {

std::string esc(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '&':
        o += "&amp;";
        break;
      case '"':
        o += "&quot;";
        break;
      default:
        o += c;
    }
  }
  return o;
}

std::string num(double v, const char* f) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string fig(double v) { return readable(v, 4); }

std::string line_chart(const std::string& title, const std::string& x_label, const std::string& y_label,
                       const std::vector<Series>& series) {
  const double w = 640, h = 320, left = 64, right = 24, legend_y = 36, top = 58, bottom = 44;
  double x0 = 1e300, x1 = -1e300, y0 = 1e300, y1 = -1e300;
  for (const Series& s : series)
    for (auto [x, y] : s.points) {
      x0 = std::min(x0, x), x1 = std::max(x1, x), y0 = std::min(y0, y), y1 = std::max(y1, y);
    }
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h << "\" viewBox=\"0 0 " << w
    << " " << h << "\" role=\"img\" aria-label=\"" << esc(title)
    << "\">\n<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n"
    << "<text x=\"10\" y=\"20\" font-size=\"14\" font-weight=\"bold\">" << esc(title) << "</text>\n";
  // The legend: one row under the title, entries side by side.
  double lx = left;
  for (const Series& s : series) {
    o << "<rect x=\"" << lx << "\" y=\"" << legend_y - 9 << "\" width=\"10\" height=\"10\" fill=\"" << s.color
      << "\"/><text x=\"" << lx + 14 << "\" y=\"" << legend_y << "\" font-size=\"11\">" << esc(s.name) << "</text>\n";
    lx += 14 + 6.5 * static_cast<double>(s.name.size()) + 18;  // ~6.5 px per character at 11 px
  }
  if (x0 > x1)
    return o.str() + "<text x=\"" + num(left, "%.0f") + "\" y=\"100\" font-size=\"12\">no data</text>\n</svg>\n";
  // 1-2-5 ticks, each axis widened to its outer ticks.
  const AxisTicks xt = axis_ticks(x0, x1, 6), yt = axis_ticks(y0, y1, 6);
  x0 = xt.lo, x1 = xt.hi, y0 = yt.lo, y1 = yt.hi;
  auto px = [&](double x) { return left + (x - x0) / (x1 - x0) * (w - left - right); };
  auto py = [&](double y) { return h - bottom - (y - y0) / (y1 - y0) * (h - top - bottom); };
  o << "<g stroke=\"#999\" stroke-width=\"1\"><line x1=\"" << left << "\" y1=\"" << h - bottom << "\" x2=\""
    << w - right << "\" y2=\"" << h - bottom << "\"/><line x1=\"" << left << "\" y1=\"" << top << "\" x2=\"" << left
    << "\" y2=\"" << h - bottom << "\"/></g>\n<g font-size=\"10\" fill=\"#444\">\n";
  for (size_t i = 0; i < xt.values.size(); ++i) {
    const bool first = i == 0, last = i + 1 == xt.values.size();
    const char* anchor = first ? "start" : last ? "end" : "middle";  // the end ticks stay inside the canvas
    o << "<text x=\"" << px(xt.values[i]) << "\" y=\"" << h - bottom + 14 << "\" text-anchor=\"" << anchor << "\">"
      << xt.labels[i] << "</text>\n";
  }
  for (size_t i = 0; i < yt.values.size(); ++i)
    o << "<text x=\"" << left - 6 << "\" y=\"" << py(yt.values[i]) + 3 << "\" text-anchor=\"end\">" << yt.labels[i]
      << "</text><line x1=\"" << left << "\" y1=\"" << py(yt.values[i]) << "\" x2=\"" << w - right << "\" y2=\""
      << py(yt.values[i]) << "\" stroke=\"#eee\"/>\n";
  o << "<text x=\"" << (left + w - right) / 2 << "\" y=\"" << h - 8 << "\" text-anchor=\"middle\" font-size=\"11\">"
    << esc(x_label) << "</text><text transform=\"translate(14," << (top + h - bottom) / 2
    << ") rotate(-90)\" text-anchor=\"middle\" font-size=\"11\">" << esc(y_label) << "</text>\n</g>\n";
  for (const Series& s : series) {
    if (s.dots) {
      for (auto [x, y] : s.points)
        o << "<circle cx=\"" << px(x) << "\" cy=\"" << py(y) << "\" r=\"3.5\" fill=\"" << s.color << "\"/>";
    } else {
      o << "<polyline fill=\"none\" stroke=\"" << s.color << "\" stroke-width=\"2\" points=\"";
      for (auto [x, y] : s.points) o << px(x) << "," << py(y) << " ";
      o << "\"/>";
    }
    o << "\n";
  }
  return o.str() + "</svg>\n";
}

std::string bar_chart(const std::string& title, const std::string& unit, const std::vector<Bar>& bars) {
  static const std::map<std::string, std::string> colours = {
      {"rapl", "#1b9e77"},  {"nvml", "#7570b3"}, {"neuron", "#e7298a"}, {"model", "#d95f02"},
      {"hours", "#386cb0"}, {"kWh", "#1b9e77"},  {"USD", "#d95f02"}};
  const double w = 640, left = 250, right = 90, row = 26, top = 36;
  const double h = top + row * std::max<size_t>(1, bars.size()) + 30;
  double max_total = 0;
  for (const Bar& b : bars) {
    double t = 0;
    for (const auto& p : b.parts) t += p.second;
    max_total = std::max(max_total, t);
  }
  if (max_total <= 0) max_total = 1;
  std::ostringstream o;
  o << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << w << "\" height=\"" << h << "\" viewBox=\"0 0 " << w
    << " " << h << "\" role=\"img\" aria-label=\"" << esc(title)
    << "\">\n<rect width=\"100%\" height=\"100%\" fill=\"#fff\"/>\n<text x=\"10\" y=\"20\" "
    << "font-size=\"14\" font-weight=\"bold\">" << esc(title) << "</text>\n";
  std::map<std::string, bool> legend;
  for (size_t i = 0; i < bars.size(); ++i) {
    const double y = top + row * i;
    // At most 36 characters (~6.5 px each at 11 px): the label ends inside the canvas.
    const std::string& full = bars[i].label;
    const std::string label = full.size() > 36 ? full.substr(0, 35) + "\u2026" : full;
    o << "<text x=\"" << left - 8 << "\" y=\"" << y + 15 << "\" text-anchor=\"end\" font-size=\"11\">" << esc(label)
      << "<title>" << esc(full) << "</title></text>";
    double x = left, total = 0;
    for (const auto& [name, v] : bars[i].parts) {
      const double bw = v / max_total * (w - left - right);
      const auto c = colours.count(name) ? colours.at(name) : "#666";
      o << "<rect x=\"" << x << "\" y=\"" << y + 3 << "\" width=\"" << std::max(0.5, bw) << "\" height=\"" << row - 8
        << "\" fill=\"" << c << "\"><title>" << esc(name) << ": " << esc(quantity(v, unit)) << "</title></rect>";
      x += bw;
      total += v;
      legend[name] = true;
    }
    o << "<text x=\"" << x + 6 << "\" y=\"" << y + 15 << "\" font-size=\"11\">" << esc(quantity(total, unit))
      << "</text>\n";
  }
  int k = 0;
  for (const auto& [name, unused] : legend) {
    (void)unused;
    const auto c = colours.count(name) ? colours.at(name) : "#666";
    o << "<rect x=\"" << left + 90 * k << "\" y=\"" << h - 18 << "\" width=\"10\" height=\"10\" fill=\"" << c
      << "\"/><text x=\"" << left + 90 * k + 14 << "\" y=\"" << h - 9 << "\" font-size=\"11\">" << esc(name)
      << "</text>";
    ++k;
  }
  return o.str() + "\n</svg>\n";
}

}  // namespace joule::tools::html
