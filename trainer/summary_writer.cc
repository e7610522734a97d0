#include "trainer/summary_writer.h"

#include <sys/utsname.h>

#include <filesystem>
#include <fstream>
#include <iostream>

#include "launch/util/file_io.h"

namespace joule::trainer {
namespace fs = std::filesystem;
namespace {

// What emissions.csv says about a node: OS, CPU model, vCPUs, memory, devices.
cost::HostInfo host_info(const cost::InstanceProfile& p) {
  utsname u{};
  uname(&u);
  cost::HostInfo h;
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      h.cpu_model = line.substr(line.find(':') + 2);
      break;
    }
  h.os = std::string(u.sysname) + "-" + u.release;
  h.vcpus = p.vcpus;
  h.memory_gib = p.memory_gib;
  h.devices = p.devices;
  h.device_model = p.devices ? p.device_model : "";
  return h;
}

std::vector<std::string> notices(RunAccounting& accounting) {
  std::vector<std::string> out = accounting.meters().notices();
  if (cost::energy_json(accounting.ledger().energy())["source"].get<std::string>().find("model") != std::string::npos)
    out.push_back(
        "energy partly or wholly modelled: instance profile watts x measured CPU utilization, steal time (other "
        "tenants' work on a shared VM) not counted as busy (" +
        accounting.cost().instance_file + ")");
  return out;
}

}  // namespace

void write_summary(const std::string& run_dir, const RunOutcome& o, const collectives::ProcessGroupInfo& info,
                   RunAccounting& accounting, const SimulatedClock* sim) {
  cost::RunSummary s;
  s.ledger = accounting.ledger();
  const cost::Spent spent = s.ledger.totals();
  s.run_dir = run_dir;
  s.status = o.preempted         ? "preempted"
             : o.reached_target  ? "finished (reached the target accuracy)"
             : o.target_accuracy ? "finished (aborted: the target accuracy not reached)"
                                 : "finished";
  s.ranks = info.world_size;
  s.nodes = info.node_count;
  s.steps = o.steps;
  s.sequences = o.sequences;
  s.segments = o.segments;
  s.nonfinite_skipped_steps = o.nonfinite_skipped;
  s.target_sequences = o.target_sequences;
  s.wall_s = o.wall_s;
  s.seq_per_s = o.seq_per_s;
  s.mfu = accounting.mfu(o.seq_per_s);
  s.preempted = o.preempted;
  s.workload = {o.model,        o.dtype,
                o.seq_len,      o.max_predictions,
                o.global_batch, o.flops_per_sequence,
                o.pack,         o.packing_efficiency};
  s.host = host_info(accounting.profile());
  s.host.gemm = o.gemm;
  s.memory = o.memory;
  s.target = cost::project_target(o.target_sequences, o.sequences, s.ledger.wall_s(), spent, o.seq_per_s);
  s.full_pretraining = cost::project_hypothetical(o.project_sequences, s.ledger.wall_s(), spent, o.seq_per_s);
  s.notices = notices(accounting);
  s.notices.insert(s.notices.end(), o.data_notes.begin(), o.data_notes.end());
  s.eval = o.eval;
  // A preempted run short of its target has not ended short of it: it goes on.
  if (o.target_accuracy && (o.target_accuracy->reached || !o.preempted)) s.target_accuracy = o.target_accuracy;
  if (sim) s.simulated = sim->figures(o.steps);
  if (!o.preempted) s.final_dir = (fs::path(run_dir) / "final").string();
  write_file_atomically((fs::path(run_dir) / "summary.json").string(), s.to_json().dump(2) + "\n");
  write_file_atomically((fs::path(run_dir) / "emissions.csv").string(), cost::emissions_csv(s));
  std::cout << cost::summary_table(s) << std::flush;
}

}  // namespace joule::trainer
