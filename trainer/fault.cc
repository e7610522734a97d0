#include "trainer/fault.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "launch/runtime.h"

namespace joule::trainer {
namespace {

const char* const kKinds[] = {"kill", "kill-in-checkpoint", "stall", "nan", "preempt", "corrupt-shard"};
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
    if constexpr (std::is_floating_point_v<T>) v = static_cast<T>(std::stod(text, &used));
    else v = static_cast<T>(std::stoll(text, &used));
    if (used == text.size()) return v;
  } catch (const std::exception&) {
  }
  throw FaultError("JOULE_FAULT: " + where + " is '" + text + "', not a number");
}

}  // namespace

FaultPlan FaultPlan::parse(const std::string& spec) {
  FaultPlan plan;
  for (const std::string& item : split(spec, ';')) {
    const size_t colon = item.find(':');
    Fault f;
    f.kind = item.substr(0, colon);
    bool known = false;
    for (const char* k : kKinds) known = known || f.kind == k;
    if (!known)
      throw FaultError("JOULE_FAULT: unknown fault '" + f.kind + "' in '" + item +
                       "'; valid: kill, kill-in-checkpoint, stall, nan, preempt, corrupt-shard");
    bool has_step = false;
    for (const std::string& kv : split(colon == std::string::npos ? "" : item.substr(colon + 1), ',')) {
      const size_t eq = kv.find('=');
      if (eq == std::string::npos) throw FaultError("JOULE_FAULT: '" + kv + "' in '" + item + "' is not key=value");
      const std::string key = kv.substr(0, eq), value = kv.substr(eq + 1), where = item + ": " + key;
      if (key == "rank") f.rank = number<int>(value, where);
      else if (key == "step") f.step = number<int64_t>(value, where), has_step = true;
      else if (key == "count" && f.kind == "nan") f.count = number<int64_t>(value, where);
      else if (key == "seconds" && f.kind == "stall") f.seconds = number<double>(value, where);
      else if (key == "stage" && f.kind == "kill-in-checkpoint") {
        bool ok = false;
        for (const char* s : kStages) ok = ok || value == s;
        if (!ok) throw FaultError("JOULE_FAULT: stage '" + value + "' in '" + item + "'; valid: rng, model, optimizer, state, manifest, renamed");
        f.stage = value;
      } else {
        throw FaultError("JOULE_FAULT: key '" + key + "' does not apply to '" + f.kind + "' (" + item + ")");
      }
    }
    if (!has_step || f.step < 1) throw FaultError("JOULE_FAULT: '" + item + "' needs step=N with N >= 1");
    if (f.rank < 0 || f.count < 1 || f.seconds < 0) throw FaultError("JOULE_FAULT: '" + item + "': rank must be >= 0, count >= 1 and seconds >= 0");
    plan.faults_.push_back(f);
  }
  return plan;
}

FaultPlan FaultPlan::from_environment() {
  const char* spec = std::getenv("JOULE_FAULT");
  return parse(spec ? spec : "");
}

const Fault* FaultPlan::at(const std::string& kind, int rank, int64_t step) const {
  for (const Fault& f : faults_)
    if (f.kind == kind && f.rank == rank && step >= f.step && step < f.step + f.count) return &f;
  return nullptr;
}

void FaultPlan::checkpoint_stage(int rank, int64_t step, const std::string& stage) const {
  const Fault* f = at("kill-in-checkpoint", rank, step);
  if (f && f->stage == stage) kill_self("inside the checkpoint of step " + std::to_string(step) + ", after stage '" + stage + "'");
}

void FaultPlan::announce(int rank) const {
  for (const Fault& f : faults_)
    if (f.rank == rank) std::cerr << (launch::rank_prefix() + "fault injection armed: " + f.kind + " at step " + std::to_string(f.step) + "\n");
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
