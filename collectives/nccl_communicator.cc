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
#include <memory>
#include <optional>
#include <thread>

#include "collectives/communicator.h"
#include "collectives/cuda_handles.h"

namespace joule::collectives {

std::unique_ptr<Communicator> make_mpi_communicator();

namespace {

using Clock = std::chrono::steady_clock;

ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case DType::kFloat32:
      return ncclFloat32;
    case DType::kFloat64:
      return ncclFloat64;
    case DType::kBFloat16:
      return ncclBfloat16;
    case DType::kFloat16:
      return ncclFloat16;
    case DType::kInt32:
      return ncclInt32;
    case DType::kInt64:
      return ncclInt64;
  }
  return ncclFloat32;
}

class NcclWork : public Work {
 public:
  NcclWork(std::string what, double timeout, int rank, CudaEvent done, std::shared_ptr<NcclComm> comm)
      : what_(std::move(what)), timeout_(timeout), rank_(rank), done_(std::move(done)), comm_(std::move(comm)) {}
  void wait() override {
    const auto start = Clock::now();
    while (true) {
      const cudaError_t q = cudaEventQuery(done_.get());
      if (q == cudaSuccess) break;
      if (q != cudaErrorNotReady)
        throw CollectiveError("[rank " + std::to_string(rank_) + "] " + what_ + ": " + cudaGetErrorString(q));
      ncclResult_t async = ncclSuccess;
      ncclCommGetAsyncError(comm_->get(), &async);
      if (async != ncclSuccess) {
        comm_->mark_failed();
        throw CollectiveError("[rank " + std::to_string(rank_) + "] " + what_ +
                              ": NCCL asynchronous error: " + ncclGetErrorString(async));
      }
      if (std::chrono::duration<double>(Clock::now() - start).count() > timeout_) {
        comm_->mark_failed();
        throw CollectiveTimeout(CollectiveTimeout::message(rank_, what_, timeout_, "a rank died or stalled"));
      }
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
    if (seconds_ < 0) seconds_ = std::chrono::duration<double>(Clock::now() - launched_).count();
  }
  bool completed() override { return cudaEventQuery(done_.get()) != cudaErrorNotReady; }
  double seconds() const override { return seconds_ < 0 ? 0 : seconds_; }

 private:
  std::string what_;
  double timeout_;
  int rank_;
  CudaEvent done_;
  std::shared_ptr<NcclComm> comm_;
  Clock::time_point launched_ = Clock::now();
  double seconds_ = -1;
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator() : bootstrap_(make_mpi_communicator()) {
    const ProcessGroupInfo& info = bootstrap_->info();
    int devices = 0;
    CUDA_CHECK(cudaGetDeviceCount(&devices));
    if (devices == 0)
      throw CollectiveError("nccl backend: no CUDA device visible to rank " + std::to_string(info.rank));
    device_ = info.local_rank % devices;
    CUDA_CHECK(cudaSetDevice(device_));
    ncclUniqueId id;
    if (info.rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    static_assert(sizeof(ncclUniqueId) % 4 == 0, "ncclUniqueId is sent as int32 words");
    Buffer raw{&id, sizeof(id) / 4, DType::kInt32, -1};
    bootstrap_->broadcast(raw, 0)->wait();
    comm_ = std::make_shared<NcclComm>(info.world_size, id, info.rank);
    stream_.emplace();
  }

  std::string backend() const override { return "nccl"; }
  const ProcessGroupInfo& info() const override { return bootstrap_->info(); }

  // Host buffers (the trainer's small reductions: step boundaries, energy, strings) go over the bootstrap MPI
  // communicator; CUDA buffers over NCCL.
  WorkHandle all_reduce(Buffer b, const CollectiveOptions& o) override {
    if (b.device < 0) return bootstrap_->all_reduce(b, o);
    return launch("all_reduce", b, o, [&] {
      return ncclAllReduce(b.data, b.data, b.count, nccl_type(b.dtype), o.op == ReduceOp::kAverage ? ncclAvg : ncclSum,
                           comm_->get(), stream_->get());
    });
  }
  WorkHandle broadcast(Buffer b, int root, const CollectiveOptions& o) override {
    if (b.device < 0) return bootstrap_->broadcast(b, root, o);
    return launch("broadcast", b, o, [&] {
      return ncclBroadcast(b.data, b.data, b.count, nccl_type(b.dtype), root, comm_->get(), stream_->get());
    });
  }
  WorkHandle all_gather(Buffer out, Buffer in, const CollectiveOptions& o) override {
    if (out.device < 0 && in.device < 0) return bootstrap_->all_gather(out, in, o);
    check_same_side("all_gather", out, in);
    return launch("all_gather", out, o, [&] {
      return ncclAllGather(in.data, out.data, in.count, nccl_type(in.dtype), comm_->get(), stream_->get());
    });
  }
  WorkHandle reduce_scatter(Buffer out, Buffer in, const CollectiveOptions& o) override {
    if (out.device < 0 && in.device < 0) return bootstrap_->reduce_scatter(out, in, o);
    check_same_side("reduce_scatter", out, in);
    return launch("reduce_scatter", out, o, [&] {
      return ncclReduceScatter(in.data, out.data, out.count, nccl_type(in.dtype),
                               o.op == ReduceOp::kAverage ? ncclAvg : ncclSum, comm_->get(), stream_->get());
    });
  }
  void barrier(const CollectiveOptions& o) override { bootstrap_->barrier(o); }

  [[noreturn]] void abort(const std::string& why, int exit_code) override {
    if (comm_) comm_->abort();
    bootstrap_->abort(why, exit_code);
    std::_Exit(exit_code);  // not reached: the bootstrap's abort does not return
  }

 private:
  static void check_same_side(const char* name, const Buffer& out, const Buffer& in) {
    if (out.device < 0 || in.device < 0)
      throw CollectiveError(std::string("nccl ") + name +
                            ": one buffer on the host and one on a GPU; give both on the same side");
  }

  template <typename Fn>
  WorkHandle launch(const char* name, const Buffer& b, const CollectiveOptions& o, Fn call) {
    CudaEvent ready, done;
    // After everything queued so far on the stream that produced the buffer (the legacy default stream if unnamed).
    CUDA_CHECK(cudaEventRecord(ready.get(), static_cast<cudaStream_t>(b.stream)));
    CUDA_CHECK(cudaStreamWaitEvent(stream_->get(), ready.get(), 0));
    NCCL_CHECK(call());
    CUDA_CHECK(cudaEventRecord(done.get(), stream_->get()));
    const std::string what = std::string(name) + (o.label.empty() ? "" : " '" + o.label + "'") + " of " +
                             std::to_string(b.bytes()) + " bytes";
    return std::make_shared<NcclWork>(what, o.timeout_seconds, info().rank, std::move(done), comm_);
  }

  std::unique_ptr<Communicator> bootstrap_;
  int device_ = 0;
  std::shared_ptr<NcclComm> comm_;
  std::optional<CudaStream> stream_;  // created once the device is set; after comm_, so destroyed first
};

}  // namespace

std::unique_ptr<Communicator> make_nccl_communicator() { return std::make_unique<NcclCommunicator>(); }

}  // namespace joule::collectives
