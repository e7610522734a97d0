// Where a process sits, from its launcher's environment: Open MPI (OMPI_COMM_WORLD_*), Slurm
// (SLURM_PROCID, SLURM_LOCALID, SLURM_NNODES, ...), PMIx (PMIX_RANK) or Hydra/PMI (PMI_RANK, PMI_SIZE,
// MPI_LOCALRANKID). Read before MPI starts, so a process can pick its device and threads early; MPI's
// own view (collectives::ProcessGroupInfo) is the authority once it runs. No LibTorch, no MPI here.
#pragma once

#include <functional>
#include <stdexcept>
#include <string>
#include <utility>

#include "launch/util/error.h"

namespace joule::launch {

class LaunchError : public joule::Error {
 public:
  explicit LaunchError(
      const std::string& message,
      std::string hint =
          "check the launcher's environment (OMPI_COMM_WORLD_*, SLURM_*, PMIX_RANK, PMI_*): launch with mpirun or srun")
      : joule::Error(message, std::move(hint)) {}
};

struct Placement {
  int rank = 0, world_size = 1;
  int local_rank = 0, local_size = 1;
  int node = 0, node_count = 1;   // -1 where the launcher does not say
  std::string launcher = "none";  // "openmpi", "slurm", "pmix", "pmi" or "none"
};

using EnvLookup = std::function<const char*(const char*)>;

// Throws LaunchError naming the variable when a value is not a number or is out of range.
Placement detect_placement(const EnvLookup& env);
Placement detect_placement();  // from this process's environment

// The cores a rank may run on: its own affinity mask (1 when the launcher binds it to a core, as mpirun does by
// default), and the union of the masks of every rank on its node (what the node's ranks share).
struct CoreView {
  int own = 1, node = 1;
};

// Intra-op threads per rank: `requested` when > 0, else the node's cores / local ranks, at most the rank's own cores
// (at least 1). Sets `warning` when the node's ranks together run more threads than they have cores, or a rank
// more threads than it is bound to; never for a binding that gives each rank its share.
int threads_per_rank(const CoreView& cores, int local_size, int requested, std::string* warning);

}  // namespace joule::launch
