#include "collectives/mpi_handles.h"

#include "collectives/mpi_check.h"

namespace joule::collectives {

MpiComm dup_comm(MPI_Comm of) {
  MPI_Comm c = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_dup(of, &c));
  return MpiComm(c, MPI_COMM_NULL);
}

MpiComm split_shared_comm(MPI_Comm of, int key) {
  MPI_Comm c = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split_type(of, MPI_COMM_TYPE_SHARED, key, MPI_INFO_NULL, &c));
  return MpiComm(c, MPI_COMM_NULL);
}

MpiDatatype contiguous_type(int count, MPI_Datatype of) {
  MPI_Datatype t = MPI_DATATYPE_NULL;
  MPI_CHECK(MPI_Type_contiguous(count, of, &t));
  if (const int rc = MPI_Type_commit(&t); rc != MPI_SUCCESS) {
    MPI_Type_free(&t);
    MPI_CHECK(rc);
  }
  return MpiDatatype(t, MPI_DATATYPE_NULL);
}

MpiOp create_op(MPI_User_function* fn, bool commutative) {
  MPI_Op o = MPI_OP_NULL;
  MPI_CHECK(MPI_Op_create(fn, commutative ? 1 : 0, &o));
  return MpiOp(o, MPI_OP_NULL);
}

}  // namespace joule::collectives
