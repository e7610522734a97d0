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

#define CUDA_CHECK(call)                                                                                    \
  do {                                                                                                      \
    const cudaError_t cuda_check_err_ = (call);                                                             \
    if (cuda_check_err_ != cudaSuccess)                                                                     \
      throw ::joule::collectives::CollectiveError(std::string(#call " failed at " __FILE__ ":") +           \
                                                  std::to_string(__LINE__) + ": " +                          \
                                                  cudaGetErrorString(cuda_check_err_));                     \
  } while (0)

#define NCCL_CHECK(call)                                                                                     \
  do {                                                                                                       \
    const ncclResult_t nccl_check_res_ = (call);                                                             \
    if (nccl_check_res_ != ncclSuccess)                                                                      \
      throw ::joule::collectives::CollectiveError(std::string(#call " failed at " __FILE__ ":") +            \
                                                  std::to_string(__LINE__) + ": " +                           \
                                                  ncclGetErrorString(nccl_check_res_) +                       \
                                                  " (NCCL_DEBUG=INFO shows why)");                            \
  } while (0)

namespace joule::collectives {

class CudaEvent {
 public:
  CudaEvent() { CUDA_CHECK(cudaEventCreateWithFlags(&e_, cudaEventDisableTiming)); }
  ~CudaEvent() {
    if (e_) cudaEventDestroy(e_);
  }
  CudaEvent(CudaEvent&& o) noexcept : e_(std::exchange(o.e_, nullptr)) {}
  CudaEvent& operator=(CudaEvent&& o) noexcept {
    std::swap(e_, o.e_);
    return *this;
  }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  cudaEvent_t get() const { return e_; }

 private:
  cudaEvent_t e_ = nullptr;
};

class CudaStream {
 public:
  CudaStream() { CUDA_CHECK(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking)); }
  ~CudaStream() {
    if (s_) cudaStreamDestroy(s_);
  }
  CudaStream(CudaStream&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  CudaStream& operator=(CudaStream&& o) noexcept {
    std::swap(s_, o.s_);
    return *this;
  }
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

// The NCCL communicator, shared by the backend and every Work handle it returned (a handle may outlive the
// backend's use of it). `failed` may be set by any thread that waits on a handle.
class NcclComm {
 public:
  NcclComm(int world_size, const ncclUniqueId& id, int rank) { NCCL_CHECK(ncclCommInitRank(&comm_, world_size, id, rank)); }
  ~NcclComm() {
    if (!comm_) return;
    if (failed_.load()) ncclCommAbort(comm_);
    else ncclCommDestroy(comm_);
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
