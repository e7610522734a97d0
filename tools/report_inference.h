// `joule summary DIR` and `joule report DIR` for an inference run (`joule bench infer --out DIR`, DIR/inference.json):
// the table of throughput, latency and per-million energy, cost and CO2 per batch size; and one self-contained HTML
// file with the throughput/latency curve, the per-million figures, and this run's model on every inference profile
// (`joule plan --inference` with this measurement as this host's row).
#pragma once

#include <string>

namespace joule::tools {

std::string inference_summary(const std::string& run_dir, bool json);
std::string write_inference_report(const std::string& run_dir, const std::string& out, const std::string& config_dir);

}  // namespace joule::tools
