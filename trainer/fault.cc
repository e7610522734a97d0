#include "trainer/fault.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <thread>

#include "launch/process.h"

namespace joule::trainer {
namespace {

constexpr FaultKind kKinds[] = {
    FaultKind::kill,    FaultKind::kill_in_checkpoint, FaultKind::stall,      FaultKind::nan,
    FaultKind::preempt, FaultKind::corrupt_shard,      FaultKind::fail_fsync, FaultKind::stale_checkpoint_view};
const char* const kStages[] = {"rng", "model", "optimizer", "state", "manifest", "renamed"};

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  std::string part;
  std::istringstream in(s);
  while (std::getline(in, part, sep))
    if (!part.empty()) out.push_back(part);
  return out;
}

template <typename T>
T number(const std::string& text, const std::string& where) {
  size_t used = 0;
  try {
    T v;
    if constexpr (std::is_floating_point_v<T>)
      v = static_cast<T>(std::stod(text, &used));
    else
      v = static_cast<T>(std::stoll(text, &used));
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  throw FaultError("JOULE_FAULT: " + where + " is '" + text + "', not a number");
}

}  // namespace

const char* fault_kind_name(FaultKind kind) {
  switch (kind) {
    case FaultKind::kill:
      return "kill";
    case FaultKind::kill_in_checkpoint:
      return "kill-in-checkpoint";
    case FaultKind::stall:
      return "stall";
    case FaultKind::nan:
      return "nan";
    case FaultKind::preempt:
      return "preempt";
    case FaultKind::corrupt_shard:
      return "corrupt-shard";
    case FaultKind::fail_fsync:
      return "fail-fsync";
    case FaultKind::stale_checkpoint_view:
      return "stale-checkpoint-view";
  }
  return "?";
}

FaultPlan FaultPlan::parse(const std::string& spec) {
  FaultPlan plan;
  for (const std::string& item : split(spec, ';')) {
    const size_t colon = item.find(':');
    Fault f;
    f.text = item;
    const std::string kind = item.substr(0, colon);
    bool known = false;
    for (FaultKind k : kKinds)
      if (kind == fault_kind_name(k)) f.kind = k, known = true;
    if (!known)
      throw FaultError(
          "JOULE_FAULT: unknown fault '" + kind + "' in '" + item +
          "'; valid: kill, kill-in-checkpoint, stall, nan, preempt, corrupt-shard, fail-fsync, stale-checkpoint-view");
    bool has_step = false;
    for (const std::string& kv : split(colon == std::string::npos ? "" : item.substr(colon + 1), ',')) {
      const size_t eq = kv.find('=');
      if (eq == std::string::npos) throw FaultError("JOULE_FAULT: '" + kv + "' in '" + item + "' is not key=value");
      const std::string key = kv.substr(0, eq), value = kv.substr(eq + 1), where = item + ": " + key;
      if (key == "rank")
        f.rank = number<int>(value, where);
      else if (key == "step")
        f.step = number<int64_t>(value, where), has_step = true;
      else if (key == "count" && f.kind == FaultKind::nan)
        f.count = number<int64_t>(value, where);
      else if (key == "seconds" && f.kind == FaultKind::stall)
        f.seconds = number<double>(value, where);
      else if (key == "stage" && (f.kind == FaultKind::kill_in_checkpoint || f.kind == FaultKind::stall)) {
        bool ok = false;
        for (const char* s : kStages) ok = ok || value == s;
        if (!ok)
          throw FaultError("JOULE_FAULT: stage '" + value + "' in '" + item +
                           "'; valid: rng, model, optimizer, state, manifest, renamed");
        f.stage = value;
      } else {
        throw FaultError("JOULE_FAULT: key '" + key + "' does not apply to '" + kind + "' (" + item + ")");
      }
    }
    if (f.kind == FaultKind::kill_in_checkpoint && f.stage.empty()) f.stage = "model";
    if (f.kind == FaultKind::stale_checkpoint_view) {
      if (has_step) throw FaultError("JOULE_FAULT: '" + item + "' takes no step (it acts when the run resumes)");
      f.step = 1;
    } else if (!has_step || f.step < 1) {
      throw FaultError("JOULE_FAULT: '" + item + "' needs step=N with N >= 1");
    }
    if (f.rank < 0 || f.count < 1 || f.seconds < 0)
      throw FaultError("JOULE_FAULT: '" + item + "': rank must be >= 0, count >= 1 and seconds >= 0");
    // Only "rng" is a stage of every rank's write; the others are rank 0's alone (trainer/checkpoint.cc), so a fault
    // there on another rank would never act and the test relying on it would pass for the wrong reason.
    if (!f.stage.empty() && f.stage != kStages[0] && f.rank != 0)
      throw FaultError("JOULE_FAULT: '" + item + "': stage '" + f.stage + "' is written by rank 0 alone, so rank " +
                       std::to_string(f.rank) + " never reaches it; use rank=0, or stage=rng (every rank's)");
    plan.faults_.push_back(f);
  }
  return plan;
}

namespace {
std::atomic<bool> injection_enabled{false};
}  // namespace

void enable_fault_injection() { injection_enabled = true; }
bool fault_injection_enabled() { return injection_enabled; }

FaultPlan FaultPlan::from_environment() {
  const char* spec = std::getenv("JOULE_FAULT");
  if (!injection_enabled) {
    if (spec && *spec)
      std::cerr << "joule: JOULE_FAULT is set and ignored: this joule is not built for fault injection (only the test "
                   "binary joule-fault-injection acts on it)\n";
    return {};
  }
  return parse(spec ? spec : "");
}

void FaultPlan::check_ranks(int world_size) const {
  for (const Fault& f : faults_)
    if (f.rank >= world_size)
      throw FaultError("JOULE_FAULT: '" + f.text + "': rank " + std::to_string(f.rank) + " is not one of this run's " +
                       std::to_string(world_size) + " rank(s) (0 to " + std::to_string(world_size - 1) +
                       "), so it would never act");
}

const Fault* FaultPlan::at(FaultKind kind, int rank, int64_t step) const {
  for (const Fault& f : faults_)
    if (f.kind == kind && f.rank == rank && step >= f.step && step < f.step + f.count) return &f;
  return nullptr;
}

void FaultPoints::announce() const {
  for (const Fault& f : plan_.faults())
    if (f.rank == rank_)
      std::cerr << (launch::rank_prefix() + "fault injection armed: " + fault_kind_name(f.kind) + " at step " +
                    std::to_string(f.step) + "\n");
}

namespace {
void stall(const Fault& f, const std::string& where) {
  char seconds[32];
  std::snprintf(seconds, sizeof seconds, "%g s", f.seconds);
  std::cerr << (launch::rank_prefix() + "fault injection: stalling " + seconds + " " + where + "\n") << std::flush;
  std::this_thread::sleep_for(std::chrono::duration<double>(f.seconds));
}
}  // namespace

void FaultPoints::before_step(int64_t step) const {
  const Fault* f = plan_.at(FaultKind::stall, rank_, step);
  if (f && f->stage.empty()) stall(*f, "before step " + std::to_string(step));
}

void FaultPoints::after_update(int64_t step, const std::function<void()>& corrupt_shards) const {
  if (plan_.at(FaultKind::kill, rank_, step)) kill_self("after step " + std::to_string(step));
  if (plan_.at(FaultKind::corrupt_shard, rank_, step)) {
    corrupt_shards();
    std::cerr << (launch::rank_prefix() + "fault injection: corrupted every training shard after step " +
                  std::to_string(step) + "\n");
  }
}

void FaultPoints::checkpoint_stage(int64_t step, const std::string& stage) const {
  const Fault* f = plan_.at(FaultKind::kill_in_checkpoint, rank_, step);
  const std::string where = "inside the checkpoint of step " + std::to_string(step) + ", after stage '" + stage + "'";
  if (f && f->stage == stage) kill_self(where);
  const Fault* s = plan_.at(FaultKind::stall, rank_, step);
  if (s && s->stage == stage) stall(*s, where);
}

void kill_self(const std::string& why) {
  std::cerr << (launch::rank_prefix() + "fault injection: SIGKILL " + why + "\n") << std::flush;
  ::kill(::getpid(), SIGKILL);
  std::abort();  // not reached
}

void corrupt_file(const std::string& path) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  if (!f) throw FaultError("fault injection: cannot open " + path + " to corrupt it");
  f.seekg(0, std::ios::end);
  const std::streamoff size = f.tellg();
  f.seekp(0);
  const std::string junk = "corrupted by JOULE_FAULT corrupt-shard\n";
  for (std::streamoff i = 0; i < size; ++i) f.put(junk[static_cast<size_t>(i) % junk.size()]);
  f.flush();
}

}  // namespace joule::trainer
