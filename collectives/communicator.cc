#include "collectives/communicator.h"

namespace joule::collectives {

std::unique_ptr<Communicator> make_mpi_communicator();
#ifdef JOULE_WITH_NCCL
std::unique_ptr<Communicator> make_nccl_communicator();
#endif

size_t dtype_bytes(DType d) {
  switch (d) {
    case DType::kFloat32:
    case DType::kInt32: return 4;
    case DType::kFloat64:
    case DType::kInt64: return 8;
    case DType::kBFloat16:
    case DType::kFloat16: return 2;
  }
  return 0;
}

const char* dtype_name(DType d) {
  switch (d) {
    case DType::kFloat32: return "float32";
    case DType::kFloat64: return "float64";
    case DType::kBFloat16: return "bfloat16";
    case DType::kFloat16: return "float16";
    case DType::kInt32: return "int32";
    case DType::kInt64: return "int64";
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
