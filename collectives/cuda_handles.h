// Owning wrappers for the CUDA and NCCL handles of the nccl backend (built with JOULE_WITH_NCCL): events, streams
// and the NCCL communicator. Move-only. A communicator marked failed is aborted (ncclCommAbort), never destroyed in
// a way that can block (ncclCommDestroy waits for outstanding work). No LibTorch.
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <string>
#include <utility>

#include "collectives/communicator.h"

#define CUDA_CHECK(call)                                                                          \
  do {                                                                                            \
    const cudaError_t cuda_check_err_ = (call);                                                   \
    if (cuda_check_err_ != cudaSuccess)                                                           \
      throw ::joule::collectives::CollectiveError(std::string(#call " failed at " __FILE__ ":") + \
                                                  std::to_string(__LINE__) + ": " +               \
                                                  cudaGetErrorString(cuda_check_err_));           \
  } while (0)

#define NCCL_CHECK(call)                                                                    \
  do {                                                                                      \
    const ncclResult_t nccl_check_res_ = (call);                                            \
    if (nccl_check_res_ != ncclSuccess)                                                     \
      throw ::joule::collectives::CollectiveError(                                          \
          std::string(#call " failed at " __FILE__ ":") + std::to_string(__LINE__) + ": " + \
          ncclGetErrorString(nccl_check_res_) + " (NCCL_DEBUG=INFO shows why)");            \
  } while (0)

namespace joule::collectives {

// One owner for a CUDA handle made by `Create` (with its flags) and destroyed by `Destroy`.
template <typename Handle, cudaError_t (*Create)(Handle*), cudaError_t (*Destroy)(Handle)>
class CudaHandle {
 public:
  CudaHandle() { CUDA_CHECK(Create(&h_)); }
  ~CudaHandle() {
    if (h_) Destroy(h_);
  }
  CudaHandle(CudaHandle&& o) noexcept : h_(std::exchange(o.h_, nullptr)) {}
  CudaHandle& operator=(CudaHandle&& o) noexcept {
    std::swap(h_, o.h_);
    return *this;
  }
  CudaHandle(const CudaHandle&) = delete;
  CudaHandle& operator=(const CudaHandle&) = delete;
  Handle get() const { return h_; }

 private:
  Handle h_ = nullptr;
};

inline cudaError_t create_event(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, cudaEventDisableTiming); }
inline cudaError_t create_stream(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, cudaStreamNonBlocking); }
inline cudaError_t destroy_event(cudaEvent_t e) { return cudaEventDestroy(e); }
inline cudaError_t destroy_stream(cudaStream_t s) { return cudaStreamDestroy(s); }

using CudaEvent = CudaHandle<cudaEvent_t, create_event, destroy_event>;      // no timing: only for ordering and polling
using CudaStream = CudaHandle<cudaStream_t, create_stream, destroy_stream>;  // non-blocking with respect to stream 0

// The NCCL communicator, shared by the backend and every Work handle it returned (a handle may outlive the
// backend's use of it). `failed` may be set by any thread that waits on a handle.
class NcclComm {
 public:
  NcclComm(int world_size, const ncclUniqueId& id, int rank) {
    NCCL_CHECK(ncclCommInitRank(&comm_, world_size, id, rank));
  }
  ~NcclComm() {
    if (!comm_) return;
    if (failed_.load())
      ncclCommAbort(comm_);
    else
      ncclCommDestroy(comm_);
  }
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  ncclComm_t get() const { return comm_; }
  void mark_failed() { failed_.store(true); }
  bool failed() const { return failed_.load(); }
  // Aborts now (the job is ending): outstanding operations are cancelled.
  void abort() {
    failed_.store(true);
    if (comm_) ncclCommAbort(std::exchange(comm_, nullptr));
  }

 private:
  ncclComm_t comm_ = nullptr;
  std::atomic<bool> failed_{false};
};

}  // namespace joule::collectives
