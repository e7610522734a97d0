#include "trainer/summary_writer.h"

#include <sys/utsname.h>

#include <filesystem>
#include <fstream>
#include <iostream>

namespace joule::trainer {
namespace fs = std::filesystem;
namespace {

// What emissions.csv says about a node: OS, CPU model, vCPUs, memory, devices.
nlohmann::json host_json(const InstanceProfile& p) {
  utsname u{};
  uname(&u);
  std::string cpu_model;
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      cpu_model = line.substr(line.find(':') + 2);
      break;
    }
  return {{"os", std::string(u.sysname) + "-" + u.release}, {"cpu_model", cpu_model}, {"vcpus", p.vcpus},
          {"memory_gib", p.memory_gib}, {"devices", p.devices}, {"device_model", p.devices ? p.device_model : ""}};
}

nlohmann::json projection_json(const Projection& p) {
  return nlohmann::json{{"sequences", p.sequences}, {"wall_s", p.wall_s}, {"kwh", p.kwh}, {"usd", p.usd}, {"co2_kg", p.co2_kg}};
}

nlohmann::json notices_json(RunAccounting& accounting, const nlohmann::json& energy) {
  nlohmann::json notices = nlohmann::json::array();
  for (const auto& n : accounting.meters().notices()) notices.push_back(n);
  if (energy["source"].get<std::string>().find("model") != std::string::npos)
    notices.push_back("energy partly or wholly modelled: instance profile watts x measured CPU utilization (" +
                      accounting.cost().instance_file + ")");
  return notices;
}

}  // namespace

void write_summary(const RunConfig& cfg, const RunOutcome& o, const collectives::ProcessGroupInfo& info, RunAccounting& accounting,
                   const SimulatedClock* sim) {
  const Ledger& ledger = accounting.ledger();
  const Figures spent = ledger.totals();
  const double billed_wall = ledger.wall_s();
  const Projection to_target = project_target(o.target_sequences, o.sequences, billed_wall, spent, o.seq_per_s);
  const Projection card = project_hypothetical(cfg.project_sequences, billed_wall, spent, o.seq_per_s);
  const nlohmann::json ledger_json = ledger.to_json();
  nlohmann::json segment_list = ledger_json["segments"];
  for (auto& g : segment_list) g.erase("energy_joules");
  const nlohmann::json energy = energy_json(ledger.energy());
  const std::string status = o.preempted ? "preempted" : o.reached_target ? "finished (reached the target accuracy)" : "finished";
  nlohmann::json summary = {
      {"run_dir", cfg.run_dir},
      {"run_id", ledger.run_id},
      {"project_name", ledger.project_name},
      {"status", status},
      {"ranks", info.world_size},
      {"nodes", info.node_count},
      {"steps", o.steps},
      {"sequences", o.sequences},
      {"wall_s", o.wall_s},
      {"billed_wall_s", billed_wall},
      {"segments", o.segments},
      {"nonfinite_skipped_steps", o.nonfinite_skipped},
      {"seq_per_s", o.seq_per_s},
      {"seq_per_hour", o.seq_per_s * 3600},
      {"mfu", accounting.mfu_json(o.seq_per_s)},
      {"target_sequences", o.target_sequences},
      {"workload", {{"model", cfg.model}, {"seq_len", cfg.seq_len}, {"max_predictions", o.max_predictions},
                    {"global_batch", o.global_batch}, {"flops_per_sequence", o.flops_per_sequence}, {"dtype", o.dtype}}},
      {"projected_wall_s_for_target", to_target.wall_s},
      {"projected_wall_s_for_450M", card.wall_s},
      {"instance", ledger_json["segments"].back()["cost"]},
      {"host", host_json(accounting.profile())},
      {"energy", energy},
      {"energy_kwh", spent.facility_kwh},
      {"energy_source", energy["source"]},
      {"cost_usd", spent.usd},
      {"instance_hours", spent.instance_hours},
      {"co2_kg", spent.co2_kg},
      {"projection",
       {{"target", projection_json(to_target)}, {"card_450M", projection_json(card)}, {"history", ledger_json["projection_history"]}}},
      {"segment_list", segment_list},
      {"notices", notices_json(accounting, energy)},
      {"preempted", o.preempted}};
  if (o.eval) summary["eval"] = nlohmann::json::parse(o.eval->to_json());
  if (sim) summary["simulated"] = sim->to_json(o.steps);
  if (!o.preempted) summary["final_dir"] = (fs::path(cfg.run_dir) / "final").string();
  std::ofstream(fs::path(cfg.run_dir) / "summary.json") << summary.dump(2) << "\n";
  std::ofstream(fs::path(cfg.run_dir) / "emissions.csv") << emissions_csv(summary);
  std::cout << summary_table(summary) << std::flush;
}

}  // namespace joule::trainer
