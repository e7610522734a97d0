// The "nccl" backend: CUDA buffers over NCCL. The NCCL unique id travels over MPI (the bootstrap
// communicator, which also gives the node facts); device = local rank. Every operation runs on the
// communicator's own stream, ordered after all work already queued on the legacy default stream by
// an event; wait() polls the completion event against the timeout and aborts the NCCL communicator
// (ncclCommAbort, never a blocking destroy) when it expires or NCCL reports an asynchronous error.
#include <cuda_runtime.h>
#include <nccl.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <thread>

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

std::unique_ptr<Communicator> make_mpi_communicator();

namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case DType::kFloat32: return ncclFloat32;
    case DType::kFloat64: return ncclFloat64;
    case DType::kBFloat16: return ncclBfloat16;
    case DType::kFloat16: return ncclFloat16;
    case DType::kInt32: return ncclInt32;
    case DType::kInt64: return ncclInt64;
  }
  return ncclFloat32;
}

// Owns the NCCL communicator; a failed one is aborted, never destroyed in a way that can block.
struct NcclComm {
  ncclComm_t comm = nullptr;
  bool failed = false;
  ~NcclComm() {
    if (!comm) return;
    if (failed) ncclCommAbort(comm);
    else ncclCommDestroy(comm);
  }
};

class NcclWork : public Work {
 public:
  NcclWork(std::string what, double timeout, int rank, cudaEvent_t done, NcclComm* comm)
      : what_(std::move(what)), timeout_(timeout), rank_(rank), done_(done), comm_(comm) {}
  ~NcclWork() override { cudaEventDestroy(done_); }
  void wait() override {
    const auto start = Clock::now();
    while (true) {
      const cudaError_t q = cudaEventQuery(done_);
      if (q == cudaSuccess) break;
      if (q != cudaErrorNotReady) throw CollectiveError("[rank " + std::to_string(rank_) + "] " + what_ + ": " + cudaGetErrorString(q));
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_->comm, &async);
      if (async != ncclSuccess) {
        comm_->failed = true;
        throw CollectiveError("[rank " + std::to_string(rank_) + "] " + what_ + ": NCCL asynchronous error: " + ncclGetErrorString(async));
      }
      if (std::chrono::duration<double>(Clock::now() - start).count() > timeout_) {
        comm_->failed = true;
        throw CollectiveTimeout("[rank " + std::to_string(rank_) + "] " + what_ + " did not finish within " +
                                std::to_string(static_cast<int>(timeout_)) + " s (a rank died or stalled)");
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    if (seconds_ < 0) seconds_ = std::chrono::duration<double>(Clock::now() - launched_).count();
  }
  bool completed() override { return cudaEventQuery(done_) != cudaErrorNotReady; }
  double seconds() const override { return seconds_ < 0 ? 0 : seconds_; }

 private:
  std::string what_;
  double timeout_;
  int rank_;
  cudaEvent_t done_;
  NcclComm* comm_;
  Clock::time_point launched_ = Clock::now();
  double seconds_ = -1;
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator() : bootstrap_(make_mpi_communicator()) {
    const ProcessGroupInfo& info = bootstrap_->info();
    int devices = 0;
    CUDA_CHECK(cudaGetDeviceCount(&devices));
    if (devices == 0) throw CollectiveError("nccl backend: no CUDA device visible to rank " + std::to_string(info.rank));
    device_ = info.local_rank % devices;
    CUDA_CHECK(cudaSetDevice(device_));
    ncclUniqueId id;
    if (info.rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    static_assert(sizeof(ncclUniqueId) % 4 == 0, "ncclUniqueId is sent as int32 words");
    Buffer raw{&id, sizeof(id) / 4, DType::kInt32, -1};
    bootstrap_->broadcast(raw, 0)->wait();
    NCCL_CHECK(ncclCommInitRank(&comm_.comm, info.world_size, id, info.rank));
    CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~NcclCommunicator() override {
    if (stream_) cudaStreamDestroy(stream_);
  }

  std::string backend() const override { return "nccl"; }
  const ProcessGroupInfo& info() const override { return bootstrap_->info(); }

  WorkHandle all_reduce(Buffer b, const CollectiveOptions& o) override {
    return launch("all_reduce", b, o, [&] {
      return ncclAllReduce(b.data, b.data, b.count, nccl_type(b.dtype), o.op == ReduceOp::kAverage ? ncclAvg : ncclSum, comm_.comm, stream_);
    });
  }
  WorkHandle broadcast(Buffer b, int root, const CollectiveOptions& o) override {
    return launch("broadcast", b, o, [&] { return ncclBroadcast(b.data, b.data, b.count, nccl_type(b.dtype), root, comm_.comm, stream_); });
  }
  WorkHandle all_gather(Buffer out, Buffer in, const CollectiveOptions& o) override {
    return launch("all_gather", out, o, [&] { return ncclAllGather(in.data, out.data, in.count, nccl_type(in.dtype), comm_.comm, stream_); });
  }
  WorkHandle reduce_scatter(Buffer out, Buffer in, const CollectiveOptions& o) override {
    return launch("reduce_scatter", out, o, [&] {
      return ncclReduceScatter(in.data, out.data, out.count, nccl_type(in.dtype), o.op == ReduceOp::kAverage ? ncclAvg : ncclSum, comm_.comm, stream_);
    });
  }
  void barrier(const CollectiveOptions& o) override { bootstrap_->barrier(o); }

  [[noreturn]] void abort(const std::string& why, int exit_code) override {
    comm_.failed = true;
    if (comm_.comm) ncclCommAbort(comm_.comm);
    comm_.comm = nullptr;
    bootstrap_->abort(why, exit_code);
    std::_Exit(exit_code);  // not reached: the bootstrap's abort does not return
  }

 private:
  template <typename Fn>
  WorkHandle launch(const char* name, const Buffer& b, const CollectiveOptions& o, Fn call) {
    if (b.device < 0) throw CollectiveError(std::string("nccl ") + name + ": the nccl backend takes CUDA device buffers");
    cudaEvent_t ready, done;
    CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventRecord(ready, nullptr));  // after everything on the legacy default stream
    CUDA_CHECK(cudaStreamWaitEvent(stream_, ready, 0));
    cudaEventDestroy(ready);
    NCCL_CHECK(call());
    CUDA_CHECK(cudaEventRecord(done, stream_));
    const std::string what = std::string(name) + (o.label.empty() ? "" : " '" + o.label + "'") + " of " + std::to_string(b.bytes()) + " bytes";
    return std::make_shared<NcclWork>(what, o.timeout_seconds, info().rank, done, &comm_);
  }

  std::unique_ptr<Communicator> bootstrap_;
  int device_ = 0;
  NcclComm comm_;
  cudaStream_t stream_ = nullptr;
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator() { return std::make_unique<NcclCommunicator>(); }

}  // namespace joule::collectives
