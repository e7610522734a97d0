// Owning wrappers for the MPI handles the mpi backend creates: communicators (duplicated or split), datatypes and
// reduction ops. Move-only; freed on destruction while MPI is still initialized, unless release()d first: a
// communicator whose operations were abandoned in flight (an error path; the job is ending) is never freed, since
// MPI may still use it. No LibTorch.
#pragma once

#include <mpi.h>

#include <utility>

namespace joule::collectives {

template <typename Handle, int (*Free)(Handle*)>
class MpiHandle {
 public:
  MpiHandle() = default;
  explicit MpiHandle(Handle h, Handle null) : h_(h), null_(null) {}
  ~MpiHandle() { reset(); }
  MpiHandle(MpiHandle&& o) noexcept : h_(std::exchange(o.h_, o.null_)), null_(o.null_) {}
  MpiHandle& operator=(MpiHandle&& o) noexcept {
    if (this != &o) {
      reset();
      null_ = o.null_;
      h_ = std::exchange(o.h_, o.null_);
    }
    return *this;
  }
  MpiHandle(const MpiHandle&) = delete;
  MpiHandle& operator=(const MpiHandle&) = delete;

  Handle get() const { return h_; }
  // Gives the handle up without freeing it (it may still be in use by MPI).
  void release() { h_ = null_; }
  void reset() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (h_ != null_ && !finalized) Free(&h_);
    h_ = null_;
  }

 private:
  Handle h_{};
  Handle null_{};
};

inline int free_comm(MPI_Comm* c) { return MPI_Comm_free(c); }
inline int free_type(MPI_Datatype* t) { return MPI_Type_free(t); }
inline int free_op(MPI_Op* o) { return MPI_Op_free(o); }

using MpiComm = MpiHandle<MPI_Comm, free_comm>;
using MpiDatatype = MpiHandle<MPI_Datatype, free_type>;
using MpiOp = MpiHandle<MPI_Op, free_op>;

// MPI calls that make a handle, wrapped: each throws CollectiveError (MPI_CHECK) and returns the owner.
MpiComm dup_comm(MPI_Comm of);
MpiComm split_shared_comm(MPI_Comm of, int key);
MpiDatatype contiguous_type(int count, MPI_Datatype of);
MpiOp create_op(MPI_User_function* fn, bool commutative);

}  // namespace joule::collectives
