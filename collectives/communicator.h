// One communicator interface for data-parallel collectives, with backends created by name
// ("mpi"; "nccl" where built). Operations are asynchronous: they return a Work handle whose wait()
// rethrows the operation's error, including a timeout that names the operation, label and rank.
// No LibTorch here: buffers are raw views (the reducer makes them from its flat gradient tensors).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "launch/placement.h"
#include "launch/util/error.h"

namespace joule::collectives {

class CollectiveError : public joule::Error {
 public:
  explicit CollectiveError(
      const std::string& message,
      std::string hint =
          "a collective failed on this rank; errors of other ranks, printed above, may say why. Then --resume auto")
      : joule::Error(message, std::move(hint)) {}
};
class CollectiveTimeout : public CollectiveError {
 public:
  // "[rank R] WHAT did not finish within S s (WHY)": S whole, or to a tenth where the deadline has a fraction.
  static std::string message(int rank, const std::string& what, double seconds, const std::string& why);
  // `hint`: what to do, for a command other than `joule train` (whose hint is the default).
  explicit CollectiveTimeout(
      const std::string& message,
      std::string hint =
          "another rank died or stalled (look for its error above); raise "
          "train.collective_timeout_seconds only if steps or checkpoint writes are legitimately that "
          "slow, then --resume auto")
      : CollectiveError(message, std::move(hint)) {}
};

enum class DType { kFloat32, kFloat64, kBFloat16, kFloat16, kInt32, kInt64 };
size_t dtype_bytes(DType d);
const char* dtype_name(DType d);

enum class ReduceOp { kSum, kAverage };

// A contiguous buffer: host memory (device == -1) or CUDA device memory (device >= 0).
struct Buffer {
  void* data = nullptr;
  size_t count = 0;  // elements
  DType dtype = DType::kFloat32;
  int device = -1;
  // CUDA: the stream (a cudaStream_t) on which the buffer's contents were produced; the collective starts after the
  // work queued there so far. nullptr: the legacy default stream.
  void* stream = nullptr;
  size_t bytes() const { return count * dtype_bytes(dtype); }
};

struct CollectiveOptions {
  ReduceOp op = ReduceOp::kSum;
  double timeout_seconds = 600;  // then the operation fails with CollectiveTimeout
  std::string label;             // what this is ("bucket 3"), for error messages and traces
};

class Work {
 public:
  virtual ~Work() = default;
  virtual void wait() = 0;             // blocks until done; rethrows the operation's error
  virtual bool completed() = 0;        // true once done or failed (never throws)
  virtual double seconds() const = 0;  // launch to completion, once completed
};
using WorkHandle = std::shared_ptr<Work>;

// Where this process sits: from MPI_Comm_split_type(SHARED) for the node facts.
struct ProcessGroupInfo {
  int rank = 0, world_size = 1;
  int local_rank = 0, local_size = 1;
  int node = 0, node_count = 1;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual std::string backend() const = 0;
  virtual const ProcessGroupInfo& info() const = 0;

  // In place. Average divides by the world size after summing.
  virtual WorkHandle all_reduce(Buffer buffer, const CollectiveOptions& options = {}) = 0;
  virtual WorkHandle broadcast(Buffer buffer, int root, const CollectiveOptions& options = {}) = 0;
  // out.count == in.count * world_size; rank r's input lands at out[r * in.count]. In place when `in` is this rank's
  // block of `out` (in.data == out.data + rank * in.bytes()): ZeRO-1 gathers its parameter buckets so.
  virtual WorkHandle all_gather(Buffer out, Buffer in, const CollectiveOptions& options = {}) = 0;
  // in.count == out.count * world_size; rank r receives the reduction of block r. In place when `out` is this rank's
  // block of `in` (out.data == in.data + rank * out.bytes()): ZeRO-1 reduces its gradient buckets so; the other
  // blocks of `in` are then undefined.
  virtual WorkHandle reduce_scatter(Buffer out, Buffer in, const CollectiveOptions& options = {}) = 0;
  virtual void barrier(const CollectiveOptions& options = {}) = 0;

  // Ends the whole job now (MPI_Abort / ncclCommAbort): the answer to a failed collective, so that
  // no rank is left waiting.
  [[noreturn]] virtual void abort(const std::string& why, int exit_code = 1) = 0;
};

// "mpi" (CPU buffers) or "nccl" (CUDA buffers; only when built with JOULE_WITH_NCCL). Initializes MPI
// on first use. Throws CollectiveError for an unknown or unavailable backend.
std::unique_ptr<Communicator> create_communicator(const std::string& backend);

// The deadline of a wait for another rank's file work of `bytes` (a write, a read, a check): the collective timeout
// plus the bytes at `slowest_bytes_per_second`, so slow storage is not taken for a fault and a dead link still ends
// the wait about as soon as one during a step.
inline double io_wait_seconds(double timeout_seconds, double bytes, double slowest_bytes_per_second) {
  return timeout_seconds + bytes / slowest_bytes_per_second;
}

// Sums a few float64 scalars over all ranks in place (metrics, flags, energy): a blocking all-reduce.
inline void sum_over_ranks(Communicator& comm, std::vector<double>& values, double timeout_seconds = 600,
                           const std::string& label = "scalars") {
  comm.all_reduce({values.data(), values.size(), DType::kFloat64}, {ReduceOp::kSum, timeout_seconds, label})->wait();
}
// Rank `root`'s string on every rank (a length, then the bytes): a blocking broadcast.
inline void broadcast_string(Communicator& comm, std::string& text, int root, double timeout_seconds = 600,
                             const std::string& label = "string") {
  int64_t length = static_cast<int64_t>(text.size());
  comm.broadcast({&length, 1, DType::kInt64}, root, {ReduceOp::kSum, timeout_seconds, label + " length"})->wait();
  std::vector<int32_t> words(static_cast<size_t>((length + 3) / 4));
  if (comm.info().rank == root && !text.empty()) std::memcpy(words.data(), text.data(), text.size());
  comm.broadcast({words.data(), words.size(), DType::kInt32}, root, {ReduceOp::kSum, timeout_seconds, label})->wait();
  if (length == 0)
    text.clear();  // no bytes: words.data() may be null
  else
    text.assign(reinterpret_cast<const char*>(words.data()), static_cast<size_t>(length));
}

// Whether `block` is rank `rank`'s block of `whole` (the in-place form of all_gather and reduce_scatter).
inline bool is_rank_block(const Buffer& block, const Buffer& whole, int rank) {
  return static_cast<const char*>(block.data) ==
         static_cast<const char*>(whole.data) + static_cast<size_t>(rank) * block.bytes();
}

std::vector<std::string> available_backends();

// This rank's cores and the union of the affinity masks of every rank on its node (collective: every rank calls it).
launch::CoreView node_core_view(Communicator& comm, double timeout_seconds = 600);

}  // namespace joule::collectives
