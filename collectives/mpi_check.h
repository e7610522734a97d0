// MPI_CHECK: a failed MPI call throws CollectiveError with the call, file, line, rank and MPI's message.
#pragma once

#include <mpi.h>

#include <string>

#include "collectives/communicator.h"

namespace joule::collectives {

inline std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, text, &len);
  return std::string(text, static_cast<size_t>(len));
}

inline int world_rank_or_minus_one() {
  int initialized = 0, rank = -1;
  MPI_Initialized(&initialized);
  if (initialized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

}  // namespace joule::collectives

#define MPI_CHECK(call)                                                                                              \
  do {                                                                                                               \
    const int mpi_check_code_ = (call);                                                                              \
    if (mpi_check_code_ != MPI_SUCCESS)                                                                              \
      throw ::joule::collectives::CollectiveError("[rank " +                                                         \
                                                  std::to_string(::joule::collectives::world_rank_or_minus_one()) +  \
                                                  "] " #call " failed at " __FILE__ ":" + std::to_string(__LINE__) + \
                                                  ": " + ::joule::collectives::mpi_error_text(mpi_check_code_));     \
  } while (0)
