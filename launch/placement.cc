#include "launch/placement.h"

#include <algorithm>
#include <cstdlib>

namespace joule::launch {
namespace {

// The integer in variable `name`, or `fallback` when it is unset.
int integer(const EnvLookup& env, const char* name, int fallback, int minimum = 0) {
  const char* v = env(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end != '\0' && *end != '(')  // SLURM_TASKS_PER_NODE looks like "4(x2)"
    throw LaunchError(std::string("environment variable ") + name + "=\"" + v + "\" is not an integer");
  if (x < minimum || x > 1 << 24)
    throw LaunchError(std::string("environment variable ") + name + "=" + v + " is out of range");
  return static_cast<int>(x);
}

void check(const Placement& p, const char* launcher) {
  if (p.rank >= p.world_size || p.local_rank >= p.local_size || (p.node_count > 0 && p.node >= p.node_count))
    throw LaunchError(std::string(launcher) + " environment is inconsistent: rank " + std::to_string(p.rank) + " of " +
                      std::to_string(p.world_size) + ", local rank " + std::to_string(p.local_rank) + " of " +
                      std::to_string(p.local_size) + ", node " + std::to_string(p.node) + " of " +
                      std::to_string(p.node_count));
}

}  // namespace

Placement detect_placement(const EnvLookup& env) {
  Placement p;
  if (env("OMPI_COMM_WORLD_RANK")) {
    p.launcher = "openmpi";
    p.rank = integer(env, "OMPI_COMM_WORLD_RANK", 0);
    p.world_size = integer(env, "OMPI_COMM_WORLD_SIZE", 1, 1);
    p.local_rank = integer(env, "OMPI_COMM_WORLD_LOCAL_RANK", 0);
    p.local_size = integer(env, "OMPI_COMM_WORLD_LOCAL_SIZE", 1, 1);
    p.node = -1;  // mpirun does not export a node index; MPI_Comm_split_type gives it once MPI runs
    p.node_count = -1;
  } else if (env("SLURM_PROCID") && env("SLURM_STEP_ID")) {  // a task of an srun step
    p.launcher = "slurm";
    p.rank = integer(env, "SLURM_PROCID", 0);
    p.world_size = integer(env, "SLURM_NTASKS", integer(env, "SLURM_NPROCS", 1, 1), 1);
    p.local_rank = integer(env, "SLURM_LOCALID", 0);
    p.local_size = integer(env, "SLURM_NTASKS_PER_NODE", integer(env, "SLURM_TASKS_PER_NODE", 1, 1), 1);
    p.node = integer(env, "SLURM_NODEID", 0);
    p.node_count = integer(env, "SLURM_NNODES", integer(env, "SLURM_JOB_NUM_NODES", 1, 1), 1);
  } else if (env("PMIX_RANK")) {
    p.launcher = "pmix";
    p.rank = integer(env, "PMIX_RANK", 0);
    p.world_size = integer(env, "PMIX_SIZE", p.rank + 1, 1);
    p.local_rank = integer(env, "PMIX_LOCAL_RANK", 0);
    p.local_size = integer(env, "PMIX_LOCAL_SIZE", p.local_rank + 1, 1);
    p.node = -1;
    p.node_count = -1;
  } else if (env("PMI_RANK")) {
    p.launcher = "pmi";
    p.rank = integer(env, "PMI_RANK", 0);
    p.world_size = integer(env, "PMI_SIZE", 1, 1);
    p.local_rank = integer(env, "MPI_LOCALRANKID", 0);
    p.local_size = integer(env, "MPI_LOCALNRANKS", 1, 1);
    p.node = -1;
    p.node_count = -1;
  }
  check(p, p.launcher.c_str());
  return p;
}

Placement detect_placement() {
  return detect_placement([](const char* name) -> const char* { return std::getenv(name); });
}

int threads_per_rank(const CoreView& cores, int local_size, int requested, std::string* warning) {
  const int node = std::max(1, cores.node), own = std::max(1, cores.own);
  local_size = std::max(1, local_size);
  const int threads = requested > 0 ? requested : std::max(1, std::min(own, node / local_size));
  if (warning) {
    warning->clear();
    if (local_size * threads > node)
      *warning = std::to_string(local_size) + " rank(s) x " + std::to_string(threads) +
                 " thread(s) on this node oversubscribe its " + std::to_string(node) +
                 " core(s): expect each rank to run slower than it could";
    else if (threads > own)
      *warning = std::to_string(threads) + " thread(s) per rank, but the launcher binds each rank to " +
                 std::to_string(own) +
                 " core(s): its threads share them (bind to more cores, e.g. mpirun --map-by slot:PE=" +
                 std::to_string(threads) + ", or lower train.threads)";
  }
  return threads;
}

}  // namespace joule::launch
