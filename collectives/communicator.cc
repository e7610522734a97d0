#include "collectives/communicator.h"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "launch/runtime.h"

namespace joule::collectives {

std::unique_ptr<Communicator> make_mpi_communicator();
#ifdef JOULE_WITH_NCCL
std::unique_ptr<Communicator> make_nccl_communicator();
#endif

std::string CollectiveTimeout::message(int rank, const std::string& what, double seconds, const std::string& why) {
  char within[32];
  std::snprintf(within, sizeof within, seconds == std::floor(seconds) ? "%.0f" : "%.1f", seconds);
  return "[rank " + std::to_string(rank) + "] " + what + " did not finish within " + within + " s (" + why + ")";
}

size_t dtype_bytes(DType d) {
  switch (d) {
    case DType::kFloat32:
    case DType::kInt32:
      return 4;
    case DType::kFloat64:
    case DType::kInt64:
      return 8;
    case DType::kBFloat16:
    case DType::kFloat16:
      return 2;
  }
  return 0;
}

const char* dtype_name(DType d) {
  switch (d) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat64:
      return "float64";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kFloat16:
      return "float16";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
  }
  return "?";
}

std::vector<std::string> available_backends() {
  std::vector<std::string> names = {"mpi"};
#ifdef JOULE_WITH_NCCL
  names.push_back("nccl");
#endif
  return names;
}

launch::CoreView node_core_view(Communicator& comm, double timeout_seconds) {
  // One row of CPU ids per node; each rank marks its own CPUs in its node's row; the sum's non-zero entries in a
  // row are the cores that node's ranks may use. (CPU ids repeat across nodes, hence a row per node.)
  constexpr size_t kWidth = CPU_SETSIZE;
  const ProcessGroupInfo& info = comm.info();
  const std::vector<int> mine = launch::affinity_cpus();
  std::vector<int32_t> marks(kWidth * static_cast<size_t>(std::max(1, info.node_count)), 0);
  const size_t row = kWidth * static_cast<size_t>(std::max(0, info.node));
  for (int c : mine) marks[row + static_cast<size_t>(c)] = 1;
  comm.all_reduce({marks.data(), marks.size(), DType::kInt32}, {ReduceOp::kSum, timeout_seconds, "cpu affinity masks"})
      ->wait();
  launch::CoreView v;
  v.own = std::max<int>(1, static_cast<int>(mine.size()));
  v.node = static_cast<int>(std::count_if(marks.begin() + static_cast<std::ptrdiff_t>(row),
                                          marks.begin() + static_cast<std::ptrdiff_t>(row + kWidth),
                                          [](int32_t m) { return m > 0; }));
  v.node = std::max(v.node, v.own);
  return v;
}

std::unique_ptr<Communicator> create_communicator(const std::string& backend) {
  if (backend == "mpi") return make_mpi_communicator();
#ifdef JOULE_WITH_NCCL
  if (backend == "nccl") return make_nccl_communicator();
#endif
  std::string names;
  for (const auto& n : available_backends()) names += (names.empty() ? "" : ", ") + n;
  throw CollectiveError("unknown or unavailable communicator backend '" + backend + "' (this build has: " + names +
                        (backend == "nccl" ? "; rebuild with CUDA and NCCL found, JOULE_WITH_NCCL=ON" : "") + ")");
}

}  // namespace joule::collectives
