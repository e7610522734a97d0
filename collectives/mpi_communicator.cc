// The "mpi" backend: CPU buffers over MPI. A progress thread issues every operation as a nonblocking
// MPI call, in submission order (so all ranks issue collectives in the same order), and drives them to
// completion with MPI_Testall; callers only wait on condition variables. bf16/fp16 sums use a custom
// MPI_Op that adds in fp32. Buffers beyond INT_MAX elements are split.
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iostream>
#include <mutex>
#include <thread>
#include <utility>

#include "collectives/communicator.h"
#include "collectives/mpi_check.h"
#include "collectives/mpi_handles.h"
#include "launch/process.h"

namespace joule::collectives {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int kSpinMicroseconds = 200;  // tight polling after a launch or completion
constexpr int kSleepMicroseconds = 20;  // then between tests
// An all-reduce of at least this many bytes runs as joule's ring (MpiCommunicator::start says why); smaller ones,
// which latency rules, as the MPI library's.
constexpr size_t kRingAllReduceBytes = size_t{1} << 20;
// Elements per MPI call (< INT_MAX). JOULE_MPI_MAX_CHUNK lowers it, so tests can cross the split.
size_t max_chunk() {
  static const size_t chunk = [] {
    const char* env = std::getenv("JOULE_MPI_MAX_CHUNK");
    const long long v = env ? std::atoll(env) : 0;
    return v > 0 && v < INT_MAX ? static_cast<size_t>(v) : size_t{1} << 30;
  }();
  return chunk;
}

float half_bits_to_float(uint16_t h, bool bf16) {
  uint32_t f;
  if (bf16) {
    f = static_cast<uint32_t>(h) << 16;
  } else {  // IEEE binary16
    const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, mant = h & 0x3ffu;
    if (exp == 0) {
      if (mant == 0) {
        f = sign;
      } else {  // subnormal: normalize
        int e = -1;
        uint32_t m = mant;
        do {
          ++e;
          m <<= 1;
        } while (!(m & 0x400u));
        f = sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (m & 0x3ffu) << 13;
      }
    } else if (exp == 31) {
      f = sign | 0x7f800000u | mant << 13;
    } else {
      f = sign | (exp + 127 - 15) << 23 | mant << 13;
    }
  }
  float out;
  std::memcpy(&out, &f, 4);
  return out;
}

uint16_t float_to_half_bits(float x, bool bf16) {
  uint32_t f;
  std::memcpy(&f, &x, 4);
  if (bf16) {
    if ((f & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((f >> 16) | 0x40);  // quiet NaN
    return static_cast<uint16_t>((f + 0x7fffu + ((f >> 16) & 1u)) >> 16);                 // round to nearest even
  }
  const uint32_t sign = (f >> 16) & 0x8000u;
  const uint32_t abs = f & 0x7fffffffu;
  if (abs >= 0x7f800000u) return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // overflow to inf
  if (abs < 0x38800000u) {                                               // subnormal or zero
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);
    const uint32_t shift = 113 - (abs >> 23), mant = (abs & 0x7fffffu) | 0x800000u;
    uint32_t h = mant >> (shift + 13);
    const uint32_t rem = mant & ((1u << (shift + 13)) - 1), half = 1u << (shift + 12);
    if (rem > half || (rem == half && (h & 1u))) ++h;
    return static_cast<uint16_t>(sign | h);
  }
  uint32_t h = ((abs >> 13) - (112u << 10));
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

template <bool kBf16>
void sum_half(void* in, void* inout, int* len, MPI_Datatype*) {
  auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i)
    b[i] = float_to_half_bits(half_bits_to_float(a[i], kBf16) + half_bits_to_float(b[i], kBf16), kBf16);
}

class MpiWork : public Work {
 public:
  MpiWork(std::string what, double timeout, int rank) : what_(std::move(what)), timeout_(timeout), rank_(rank) {}
  void wait() override {
    std::unique_lock<std::mutex> lock(mutex_);
    const auto deadline = launched_ + std::chrono::duration<double>(timeout_);
    if (!cv_.wait_until(lock, deadline, [&] { return done_; }))
      throw CollectiveTimeout(CollectiveTimeout::message(
          rank_, what_, timeout_, "a rank died, stalled, or issued collectives in another order"));
    if (error_) std::rethrow_exception(error_);
  }
  bool completed() override {
    std::lock_guard<std::mutex> lock(mutex_);
    return done_;
  }
  double seconds() const override { return seconds_; }
  void finish(std::exception_ptr error = nullptr) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      seconds_ = std::chrono::duration<double>(Clock::now() - launched_).count();
      error_ = error;
      done_ = true;
    }
    cv_.notify_all();
  }
  const std::string& what() const { return what_; }

 private:
  std::string what_;
  double timeout_;
  int rank_;
  Clock::time_point launched_ = Clock::now();
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::exception_ptr error_;
  double seconds_ = 0;
};

enum class Kind { kAllReduce, kBroadcast, kAllGather, kReduceScatter, kBarrier };
const char* kind_name(Kind k) {
  switch (k) {
    case Kind::kAllReduce:
      return "all_reduce";
    case Kind::kBroadcast:
      return "broadcast";
    case Kind::kAllGather:
      return "all_gather";
    case Kind::kReduceScatter:
      return "reduce_scatter";
    case Kind::kBarrier:
      return "barrier";
  }
  return "?";
}

struct Op {
  Kind kind = Kind::kBarrier;
  Buffer out, in;  // in-place operations use `out`
  int root = 0;
  CollectiveOptions options;
  std::shared_ptr<MpiWork> work;
  std::vector<MPI_Request> requests;
  // The in-place reduce-scatter and a large all-reduce run as a ring of point-to-point steps
  // (MpiCommunicator::post_ring_step): which step is in flight, how many there are (0: not a ring), the tag of this
  // operation's messages, and the block received in a reducing step.
  int ring_step = 0, ring_steps = 0, ring_tag = 0;
  std::vector<char> ring_block;
};

class MpiCommunicator : public Communicator {
 public:
  MpiCommunicator() {
    launch::ensure_mpi_initialized();
    comm_ = dup_comm(MPI_COMM_WORLD);
    MPI_CHECK(MPI_Comm_set_errhandler(comm_.get(), MPI_ERRORS_RETURN));  // errors come back to MPI_CHECK
    MPI_CHECK(MPI_Comm_rank(comm_.get(), &info_.rank));
    MPI_CHECK(MPI_Comm_size(comm_.get(), &info_.world_size));
    const MpiComm local = split_shared_comm(comm_.get(), info_.rank);
    MPI_CHECK(MPI_Comm_rank(local.get(), &info_.local_rank));
    MPI_CHECK(MPI_Comm_size(local.get(), &info_.local_size));
    // Nodes: number the local-rank-0 processes, then share the number within each node.
    int leader = info_.local_rank == 0 ? 1 : 0, before = 0;
    MPI_CHECK(MPI_Exscan(&leader, &before, 1, MPI_INT, MPI_SUM, comm_.get()));
    if (info_.rank == 0) before = 0;
    int node = before;
    MPI_CHECK(MPI_Bcast(&node, 1, MPI_INT, 0, local.get()));
    info_.node = node;
    MPI_CHECK(MPI_Allreduce(&leader, &info_.node_count, 1, MPI_INT, MPI_SUM, comm_.get()));

    half_type_ = contiguous_type(2, MPI_BYTE);
    sum_bf16_ = create_op(&sum_half<true>, true);
    sum_fp16_ = create_op(&sum_half<false>, true);
    thread_ = std::thread([this] { progress(); });
  }

  ~MpiCommunicator() override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    if (aborted_ || abandoned_) {  // operations abandoned in flight may still use these: leave them to the ending job
      comm_.release();
      half_type_.release();
      sum_bf16_.release();
      sum_fp16_.release();
    }
  }

  std::string backend() const override { return "mpi"; }
  const ProcessGroupInfo& info() const override { return info_; }

  WorkHandle all_reduce(Buffer b, const CollectiveOptions& o) override { return submit(Kind::kAllReduce, b, {}, 0, o); }
  WorkHandle broadcast(Buffer b, int root, const CollectiveOptions& o) override {
    if (root < 0 || root >= info_.world_size)
      throw CollectiveError("broadcast root " + std::to_string(root) + " outside the world");
    return submit(Kind::kBroadcast, b, {}, root, o);
  }
  WorkHandle all_gather(Buffer out, Buffer in, const CollectiveOptions& o) override {
    if (out.count != in.count * static_cast<size_t>(info_.world_size) || out.dtype != in.dtype)
      throw CollectiveError("all_gather: output must hold world_size x input elements of the same dtype");
    return submit(Kind::kAllGather, out, in, 0, o);
  }
  WorkHandle reduce_scatter(Buffer out, Buffer in, const CollectiveOptions& o) override {
    if (in.count != out.count * static_cast<size_t>(info_.world_size) || out.dtype != in.dtype)
      throw CollectiveError("reduce_scatter: input must hold world_size x output elements of the same dtype");
    return submit(Kind::kReduceScatter, out, in, 0, o);
  }
  void barrier(const CollectiveOptions& o) override { submit(Kind::kBarrier, {}, {}, 0, o)->wait(); }

  [[noreturn]] void abort(const std::string& why, int exit_code) override {
    std::cerr << "[rank " << info_.rank << "] joule: aborting the job: " << why << std::endl;
    aborted_ = true;
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code);
  }

 private:
  WorkHandle submit(Kind kind, Buffer out, Buffer in, int root, const CollectiveOptions& o) {
    for (const Buffer* b : {&out, &in})
      if (b->device >= 0)
        throw CollectiveError("the mpi backend takes host buffers; use the nccl backend for CUDA memory");
    if (kind == Kind::kAllReduce || kind == Kind::kReduceScatter) {
      if (o.op == ReduceOp::kAverage && (out.dtype == DType::kInt32 || out.dtype == DType::kInt64))
        throw CollectiveError("average is defined for floating-point buffers only");
    }
    if ((kind == Kind::kAllGather || kind == Kind::kReduceScatter) && (in.count > INT_MAX || out.count > INT_MAX))
      throw CollectiveError(std::string(kind_name(kind)) + ": more than INT_MAX elements per rank is not supported");
    std::string what = std::string(kind_name(kind)) + (o.label.empty() ? "" : " '" + o.label + "'");
    if (kind != Kind::kBarrier) what += " of " + std::to_string(std::max(out.bytes(), in.bytes())) + " bytes";
    auto op = std::make_shared<Op>();
    op->kind = kind;
    op->out = out;
    op->in = in;
    op->root = root;
    op->options = o;
    op->work = std::make_shared<MpiWork>(what, o.timeout_seconds, info_.rank);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (failed_)
        throw CollectiveError("[rank " + std::to_string(info_.rank) + "] communicator unusable after: " + failure_);
      queue_.push_back(op);
    }
    cv_.notify_all();
    return op->work;
  }

  MPI_Datatype mpi_type(DType d) const {
    switch (d) {
      case DType::kFloat32:
        return MPI_FLOAT;
      case DType::kFloat64:
        return MPI_DOUBLE;
      case DType::kInt32:
        return MPI_INT32_T;
      case DType::kInt64:
        return MPI_INT64_T;
      case DType::kBFloat16:
      case DType::kFloat16:
        return half_type_.get();
    }
    return MPI_BYTE;
  }
  MPI_Op mpi_sum(DType d) const {
    if (d == DType::kBFloat16) return sum_bf16_.get();
    if (d == DType::kFloat16) return sum_fp16_.get();
    return MPI_SUM;
  }

  void start(Op& op) {
    const MPI_Datatype type = mpi_type(op.kind == Kind::kBarrier ? DType::kFloat32 : op.out.dtype);
    const size_t elem = dtype_bytes(op.out.dtype);
    auto* base = static_cast<char*>(op.out.data);
    MPI_Request r;
    switch (op.kind) {
      case Kind::kAllReduce:
        // Large ones (the reducer's buckets) as joule's own ring, so that neither the algorithm nor the order of the
        // additions depends on the MPI library or its settings (Open MPI's libnbc takes a binomial tree below 4
        // ranks unless told otherwise: launch/process.h prefer_ring_allreduce). Its ring, so told, allocates a
        // temporary of the whole buffer per operation; this one a block: the bert-base gradient's 17 buckets in 0.107
        // s against 0.131 (2 ranks on one host, `joule bench comm`, BENCHMARKS.md).
        if (ring_all_reduce_applies(op)) {
          start_ring(op, 2 * (info_.world_size - 1), (op.out.count + info_.world_size - 1) / info_.world_size);
          break;
        }
        for (size_t begin = 0; begin < op.out.count; begin += max_chunk()) {
          const int n = static_cast<int>(std::min(max_chunk(), op.out.count - begin));
          MPI_CHECK(MPI_Iallreduce(MPI_IN_PLACE, base + begin * elem, n, type, mpi_sum(op.out.dtype), comm_.get(), &r));
          op.requests.push_back(r);
        }
        break;
      case Kind::kBroadcast:
        for (size_t begin = 0; begin < op.out.count; begin += max_chunk()) {
          const int n = static_cast<int>(std::min(max_chunk(), op.out.count - begin));
          MPI_CHECK(MPI_Ibcast(base + begin * elem, n, type, op.root, comm_.get(), &r));
          op.requests.push_back(r);
        }
        break;
      case Kind::kAllGather:
        if (is_rank_block(op.in, op.out, info_.rank))  // this rank's block is already in place
          MPI_CHECK(MPI_Iallgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, op.out.data, static_cast<int>(op.in.count), type,
                                   comm_.get(), &r));
        else
          MPI_CHECK(MPI_Iallgather(op.in.data, static_cast<int>(op.in.count), type, op.out.data,
                                   static_cast<int>(op.in.count), type, comm_.get(), &r));
        op.requests.push_back(r);
        break;
      case Kind::kReduceScatter:
        // In place (the reducer's buckets): a ring. Open MPI's own non-blocking reduce-scatter (libnbc) reduces the
        // whole buffer to rank 0 in a binomial tree, then scatters it: every message the whole bucket, two
        // bucket-sized temporaries per operation in flight, all the arithmetic on rank 0.
        if (is_rank_block(op.out, op.in, info_.rank) && info_.world_size > 1) {
          start_ring(op, info_.world_size - 1, op.out.count);
          break;
        }
        // Out of place, or in place on one rank (MPI_IN_PLACE: the result stays at the start, rank 0's block).
        MPI_CHECK(MPI_Ireduce_scatter_block(op.out.data == op.in.data ? MPI_IN_PLACE : op.in.data, op.out.data,
                                            static_cast<int>(op.out.count), type, mpi_sum(op.out.dtype), comm_.get(),
                                            &r));
        op.requests.push_back(r);
        break;
      case Kind::kBarrier:
        MPI_CHECK(MPI_Ibarrier(comm_.get(), &r));
        op.requests.push_back(r);
        break;
    }
  }

  bool ring_all_reduce_applies(const Op& op) const {
    const size_t n = static_cast<size_t>(info_.world_size);
    return n > 1 && op.out.bytes() >= kRingAllReduceBytes && op.out.count >= n &&
           (op.out.count + n - 1) / n <= static_cast<size_t>(INT_MAX);
  }

  // The ring's buffer, cut into world_size blocks: a reduce-scatter's input (its blocks all the size of the output),
  // an all-reduce's buffer (block b its elements [b C / n, (b + 1) C / n)).
  char* ring_buffer(const Op& op) const {
    return static_cast<char*>(op.kind == Kind::kAllReduce ? op.out.data : op.in.data);
  }
  int ring_index(int i) const { return (i % info_.world_size + info_.world_size) % info_.world_size; }  // i mod n
  std::pair<size_t, size_t> ring_block_range(const Op& op, int block) const {  // first element, count
    const size_t b = static_cast<size_t>(block), n = static_cast<size_t>(info_.world_size);
    if (op.kind != Kind::kAllReduce) return {b * op.out.count, op.out.count};
    const size_t first = b * op.out.count / n;
    return {first, (b + 1) * op.out.count / n - first};
  }

  void start_ring(Op& op, int steps, size_t largest_block) {
    op.ring_steps = steps;
    op.ring_tag = 1 + static_cast<int>(ring_operations_++ % 30000);
    op.ring_block.resize(largest_block * dtype_bytes(op.out.dtype));
    post_ring_step(op);
  }

  // A ring over n ranks. Its first n - 1 steps reduce and scatter: in step s this rank sends block (rank - s - 1) mod n
  // to the next rank and receives block (rank - s - 2) mod n from the previous one, which it adds into its own copy of
  // that block; the block it sends next is the one it has just added to. After them its own block, (rank - n) mod n =
  // rank, holds every rank's sum. An all-reduce's next n - 1 steps pass the summed blocks round: in step t it sends
  // block (rank - t) mod n and receives block (rank - t - 1) mod n in place. Each rank sends and receives (n - 1) / n
  // of the buffer per half, adds as much, and keeps one block as a temporary.
  void post_ring_step(Op& op) {
    const int n = info_.world_size, rank = info_.rank, s = op.ring_step;
    const bool gather = s >= n - 1;
    const int t = gather ? s - (n - 1) : s + 1;
    const auto [send_first, send_count] = ring_block_range(op, ring_index(rank - t));
    const auto [receive_first, receive_count] = ring_block_range(op, ring_index(rank - t - 1));
    const MPI_Datatype type = mpi_type(op.out.dtype);
    const size_t elem = dtype_bytes(op.out.dtype);
    char* base = ring_buffer(op);
    MPI_Request r;
    // The send first: over Open MPI's TCP transport between 2 nodes (tests/cluster/alpha_beta.sh's shaped links) a
    // 4 MiB all-reduce took twice the wire time with the receive posted first, the line rate with the send first.
    MPI_CHECK(MPI_Isend(base + send_first * elem, static_cast<int>(send_count), type, ring_index(rank + 1), op.ring_tag,
                        comm_.get(), &r));
    op.requests.push_back(r);
    MPI_CHECK(MPI_Irecv(gather ? base + receive_first * elem : op.ring_block.data(), static_cast<int>(receive_count),
                        type, ring_index(rank - 1), op.ring_tag, comm_.get(), &r));
    op.requests.push_back(r);
  }

  // After an operation's requests completed: true when it is done; a ring adds what a reducing step received and
  // posts its next step.
  bool finish_stage(Op& op) {
    if (op.ring_steps == 0) return true;
    if (op.ring_step < info_.world_size - 1) {  // the block post_ring_step received into ring_block
      const auto [first, count] = ring_block_range(op, ring_index(info_.rank - op.ring_step - 2));
      MPI_CHECK(MPI_Reduce_local(op.ring_block.data(), ring_buffer(op) + first * dtype_bytes(op.out.dtype),
                                 static_cast<int>(count), mpi_type(op.out.dtype), mpi_sum(op.out.dtype)));
    }
    op.requests.clear();
    if (++op.ring_step == op.ring_steps) return true;
    post_ring_step(op);
    return false;
  }

  void complete(Op& op) {
    if ((op.kind == Kind::kAllReduce || op.kind == Kind::kReduceScatter) && op.options.op == ReduceOp::kAverage) {
      const double scale = 1.0 / info_.world_size;
      switch (op.out.dtype) {
        case DType::kFloat32: {
          auto* p = static_cast<float*>(op.out.data);
          for (size_t i = 0; i < op.out.count; ++i) p[i] = static_cast<float>(p[i] * scale);
          break;
        }
        case DType::kFloat64: {
          auto* p = static_cast<double*>(op.out.data);
          for (size_t i = 0; i < op.out.count; ++i) p[i] *= scale;
          break;
        }
        case DType::kBFloat16:
        case DType::kFloat16: {
          const bool bf16 = op.out.dtype == DType::kBFloat16;
          auto* p = static_cast<uint16_t*>(op.out.data);
          for (size_t i = 0; i < op.out.count; ++i)
            p[i] = float_to_half_bits(static_cast<float>(half_bits_to_float(p[i], bf16) * scale), bf16);
          break;
        }
        default:
          break;
      }
    }
    op.work->finish();
  }

  void progress() {
    std::deque<std::shared_ptr<Op>> in_flight;
    auto last_event = Clock::now();
    while (true) {
      std::deque<std::shared_ptr<Op>> fresh;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        if (in_flight.empty()) cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
        if (stop_) {  // normally nothing is in flight here; on an error path, leave it (the job ends)
          abandoned_ = !in_flight.empty() || !queue_.empty();
          keep_for_mpi(in_flight);
          return;
        }
        fresh.swap(queue_);
      }
      try {
        for (auto& op : fresh) {
          start(*op);
          in_flight.push_back(op);
        }
        bool progressed = false;
        for (auto it = in_flight.begin(); it != in_flight.end();) {
          int done = 0;
          MPI_CHECK(MPI_Testall(static_cast<int>((*it)->requests.size()), (*it)->requests.data(), &done,
                                MPI_STATUSES_IGNORE));
          if (done && finish_stage(**it)) {
            complete(**it);
            it = in_flight.erase(it);
            progressed = true;
          } else if (done) {  // a ring's next step is in flight
            ++it;
            progressed = true;
          } else {
            ++it;
          }
        }
        // Poll tightly (yielding the core) for a short window after anything happened, since small
        // operations finish within it; then sleep between tests so a waiting rank does not take
        // the cores that backward is computing on.
        if (progressed || !fresh.empty()) last_event = Clock::now();
        if (!progressed && !in_flight.empty()) {
          if (Clock::now() - last_event < std::chrono::microseconds(kSpinMicroseconds))
            std::this_thread::yield();
          else
            std::this_thread::sleep_for(std::chrono::microseconds(kSleepMicroseconds));
        }
      } catch (...) {
        const auto error = std::current_exception();
        std::lock_guard<std::mutex> lock(mutex_);
        failed_ = true;
        try {
          std::rethrow_exception(error);
        } catch (const std::exception& e) {
          failure_ = e.what();
        }
        for (auto& op : in_flight) op->work->finish(error);
        for (auto& op : queue_) op->work->finish(error);
        queue_.clear();
        keep_for_mpi(in_flight);
        return;
      }
    }
  }

  // Operations abandoned in flight may still have receives posted into memory they own (a ring's block): it is never
  // freed, as the communicator and its types are not (the job is ending).
  static void keep_for_mpi(std::deque<std::shared_ptr<Op>>& in_flight) {
    if (in_flight.empty()) return;
    new std::deque<std::shared_ptr<Op>>(std::move(in_flight));  // NOLINT: deliberately leaked
  }

  ProcessGroupInfo info_;
  MpiComm comm_;
  MpiDatatype half_type_;
  MpiOp sum_bf16_, sum_fp16_;
  bool abandoned_ = false;        // the progress thread stopped with operations still in flight (read after join)
  uint64_t ring_operations_ = 0;  // rings started (reduce-scatters, large all-reduces): their tags
  std::atomic<bool> aborted_{false};

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Op>> queue_;
  bool stop_ = false, failed_ = false;
  std::string failure_;
  std::thread thread_;
};

}  // namespace

std::unique_ptr<Communicator> make_mpi_communicator() { return std::make_unique<MpiCommunicator>(); }

}  // namespace joule::collectives
