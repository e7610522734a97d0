// `joule summary` and `joule report`: what a run (or an inference run) spent, as text or HTML.
#include <iostream>
#include <string>

#include "tools/cli/command.h"
#include "tools/cli/flags.h"
#include "tools/config_dir.h"
#include "tools/report.h"

namespace joule::cli {

int summary(int argc, char** argv) {
  cxxopts::Options o("joule summary", "print a run's training-cost summary and rewrite its emissions.csv");
  add_path_flags(o, {{"run", "run directory (also as the first argument)", PathKind::input_dir}});
  o.add_options()("json", "print the summary as JSON (summary.json's keys; its schema_version says which)");
  o.parse_positional({"run"});
  o.positional_help("RUN").show_positional_help();
  auto r = parse(o, argc, argv);
  std::cout << tools::run_summary(required(r, "run"), r.count("json") > 0);
  return 0;
}

int report(int argc, char** argv) {
  cxxopts::Options o("joule report", "write a self-contained HTML report of a run (SVG charts)");
  add_path_flags(o, {{"run", "run directory (also as the first argument)", PathKind::input_dir},
                     {"out", "output file (default RUN/report.html)", PathKind::output_file, "", "report.html", ""},
                     {"compare", "another training run whose held-out accuracy to draw beside this one's",
                      PathKind::input_dir, "", "", ""}});
  const NumberFlag nodes{"nodes", "instances per profile for the workload projection", "16", kNodes};
  add_number_flags(o, {nodes});
  o.parse_positional({"run"});
  o.positional_help("RUN").show_positional_help();
  auto r = parse(o, argc, argv);
  std::cout << tools::write_report(required(r, "run"), r["out"].as<std::string>(), tools::config_dir(),
                                   static_cast<int>(int_flag(r, nodes)), r["compare"].as<std::string>())
            << "\n";
  return 0;
}

}  // namespace joule::cli
