// Multi-rank tests of the mpi backend and the gradient reducer (run at 2 and 4 ranks). Expected
// values are closed forms in the rank and world size.
#include <gtest/gtest.h>

#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <thread>

#include "collectives/communicator.h"
#include "collectives/reducer.h"
#include "launch/placement.h"
#include "models/bert.h"
#include "tests/support/test_util.h"

using namespace joule::collectives;

namespace {

Communicator& comm() {
  static std::unique_ptr<Communicator> c = create_communicator("mpi");
  return *c;
}

uint16_t to_bf16(float x) {
  uint32_t f;
  std::memcpy(&f, &x, 4);
  return static_cast<uint16_t>(f >> 16);  // exact for the small integers used here
}
float from_bf16(uint16_t h) {
  uint32_t f = static_cast<uint32_t>(h) << 16;
  float x;
  std::memcpy(&x, &f, 4);
  return x;
}

}  // namespace

TEST(Collectives, ProcessGroupFactsOnOneHost) {
  if (std::getenv("JOULE_EXPECT_NODES")) GTEST_SKIP() << "run across emulated nodes (tests/cluster)";
  const ProcessGroupInfo& i = comm().info();
  EXPECT_GE(i.world_size, 2);
  EXPECT_EQ(i.node_count, 1);
  EXPECT_EQ(i.node, 0);
  EXPECT_EQ(i.local_size, i.world_size);
  EXPECT_EQ(i.local_rank, i.rank);
  // The launcher's environment, read before MPI starts, agrees with MPI.
  const joule::launch::Placement p = joule::launch::detect_placement();
  EXPECT_EQ(p.launcher, "openmpi");
  EXPECT_EQ(p.rank, i.rank);
  EXPECT_EQ(p.world_size, i.world_size);
  EXPECT_EQ(p.local_rank, i.local_rank);
  EXPECT_EQ(p.local_size, i.local_size);
}

// Across the emulated nodes of tests/cluster (mpirun --map-by slot over a hostfile of N nodes, R slots each): rank r
// is on node r / R with local rank r % R, on the host named node<r / R + 1>.
TEST(Collectives, ProcessGroupFactsAcrossNodes) {
  const char* nodes_env = std::getenv("JOULE_EXPECT_NODES");
  const char* per_node_env = std::getenv("JOULE_EXPECT_RANKS_PER_NODE");
  if (!nodes_env || !per_node_env)
    GTEST_SKIP() << "only under tests/cluster (JOULE_EXPECT_NODES, JOULE_EXPECT_RANKS_PER_NODE)";
  const int nodes = std::atoi(nodes_env), per_node = std::atoi(per_node_env);
  const ProcessGroupInfo& i = comm().info();
  SCOPED_TRACE("rank " + std::to_string(i.rank));
  EXPECT_EQ(i.world_size, nodes * per_node);
  EXPECT_EQ(i.node_count, nodes);
  EXPECT_EQ(i.node, i.rank / per_node);
  EXPECT_EQ(i.local_size, per_node);
  EXPECT_EQ(i.local_rank, i.rank % per_node);
  char host[256] = {0};
  ASSERT_EQ(gethostname(host, sizeof host - 1), 0);
  EXPECT_EQ(std::string(host), "node" + std::to_string(i.rank / per_node + 1));
  const joule::launch::Placement p = joule::launch::detect_placement();
  EXPECT_EQ(p.launcher, "openmpi");
  EXPECT_EQ(p.rank, i.rank);
  EXPECT_EQ(p.local_rank, i.local_rank);
  EXPECT_EQ(p.local_size, i.local_size);
  // A sum over every rank crosses the nodes (TCP): each node's ranks add their node index.
  std::vector<double> sums(1, static_cast<double>(i.node));
  joule::collectives::sum_over_ranks(comm(), sums);
  EXPECT_EQ(sums[0], static_cast<double>(per_node) * nodes * (nodes - 1) / 2);
}

TEST(Collectives, AllReduceSumAndAverageEveryDtype) {
  const int n = comm().info().world_size, r = comm().info().rank;
  const double sum = n * (n + 1) / 2.0;  // rank r contributes r + 1
  {
    std::vector<float> v(1000, static_cast<float>(r + 1));
    comm().all_reduce({v.data(), v.size(), DType::kFloat32})->wait();
    for (float x : v) ASSERT_EQ(x, sum);
    std::vector<float> a(7, static_cast<float>(r + 1));
    CollectiveOptions avg;
    avg.op = ReduceOp::kAverage;
    comm().all_reduce({a.data(), a.size(), DType::kFloat32}, avg)->wait();
    for (float x : a) ASSERT_FLOAT_EQ(x, static_cast<float>(sum / n));
  }
  {
    std::vector<double> v(33, r + 1.0);
    comm().all_reduce({v.data(), v.size(), DType::kFloat64})->wait();
    for (double x : v) ASSERT_EQ(x, sum);
  }
  {
    std::vector<int32_t> v(5, r + 1);
    std::vector<int64_t> w(5, (int64_t{1} << 40) * (r + 1));
    comm().all_reduce({v.data(), v.size(), DType::kInt32})->wait();
    comm().all_reduce({w.data(), w.size(), DType::kInt64})->wait();
    for (int32_t x : v) ASSERT_EQ(x, static_cast<int32_t>(sum));
    for (int64_t x : w) ASSERT_EQ(x, (int64_t{1} << 40) * static_cast<int64_t>(sum));
  }
  for (DType half : {DType::kBFloat16, DType::kFloat16}) {
    std::vector<uint16_t> v(100);
    for (auto& x : v) {
      if (half == DType::kBFloat16)
        x = to_bf16(static_cast<float>(r + 1));
      else
        x = static_cast<uint16_t>(0x3c00 + 0);  // fp16 1.0
    }
    comm().all_reduce({v.data(), v.size(), half})->wait();
    for (uint16_t x : v) {
      if (half == DType::kBFloat16)
        ASSERT_EQ(from_bf16(x), sum);
      else
        ASSERT_EQ(x, n == 2 ? 0x4000 : 0x4400);  // fp16 2.0 or 4.0
    }
  }
}

TEST(Collectives, AllReduceSplitsBuffersBeyondTheChunkLimit) {
  // JOULE_MPI_MAX_CHUNK=1000 is set for this binary: 2500 elements go as three MPI calls.
  const int n = comm().info().world_size, r = comm().info().rank;
  std::vector<float> v(2500);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 97) + r;
  comm().all_reduce({v.data(), v.size(), DType::kFloat32})->wait();
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(v[i], n * static_cast<float>(i % 97) + n * (n - 1) / 2.0f) << i;
}

TEST(Collectives, BroadcastAllGatherReduceScatterBarrier) {
  const int n = comm().info().world_size, r = comm().info().rank;
  std::vector<int64_t> b(10, r == n - 1 ? 42 : -1);
  comm().broadcast({b.data(), b.size(), DType::kInt64}, n - 1)->wait();
  for (int64_t x : b) ASSERT_EQ(x, 42);

  std::vector<float> in(3), out(3 * static_cast<size_t>(n));
  for (int i = 0; i < 3; ++i) in[static_cast<size_t>(i)] = static_cast<float>(100 * r + i);
  comm().all_gather({out.data(), out.size(), DType::kFloat32}, {in.data(), in.size(), DType::kFloat32})->wait();
  for (int q = 0; q < n; ++q)
    for (int i = 0; i < 3; ++i) ASSERT_EQ(out[static_cast<size_t>(q * 3 + i)], 100 * q + i);

  std::vector<double> blocks(2 * static_cast<size_t>(n)), mine(2);
  for (int q = 0; q < n; ++q) blocks[2 * q] = blocks[2 * q + 1] = r + q;  // block q of rank r
  comm().reduce_scatter({mine.data(), 2, DType::kFloat64}, {blocks.data(), blocks.size(), DType::kFloat64})->wait();
  EXPECT_EQ(mine[0], n * (n - 1) / 2.0 + n * r);
  EXPECT_EQ(mine[1], mine[0]);
  comm().barrier();

  EXPECT_THROW(comm().all_gather({out.data(), 1, DType::kFloat32}, {in.data(), 3, DType::kFloat32}), CollectiveError);
  std::vector<int32_t> ints(2);
  CollectiveOptions avg;
  avg.op = ReduceOp::kAverage;
  EXPECT_THROW(comm().all_reduce({ints.data(), 2, DType::kInt32}, avg), CollectiveError);
  EXPECT_THROW(create_communicator("carrier-pigeon"), CollectiveError);
}

TEST(Collectives, AStalledRankIsATimeoutNamingOperationAndRank) {
  const int r = comm().info().rank;
  std::vector<float> v(16, 1.0f);
  CollectiveOptions o;
  o.label = "stall probe";
  o.timeout_seconds = 1.5;  // a deadline with a fraction is said to a tenth
  if (r == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(3000));  // rank 0 stalls past the timeout
    o.timeout_seconds = 60;
    comm().all_reduce({v.data(), v.size(), DType::kFloat32}, o)->wait();
  } else {
    const auto t0 = std::chrono::steady_clock::now();
    WorkHandle w = comm().all_reduce({v.data(), v.size(), DType::kFloat32}, o);
    try {
      w->wait();
      FAIL() << "expected a timeout";
    } catch (const CollectiveTimeout& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("[rank " + std::to_string(r) + "]"), std::string::npos) << m;
      EXPECT_NE(m.find("all_reduce 'stall probe'"), std::string::npos) << m;
      EXPECT_NE(m.find("did not finish within 1.5 s"), std::string::npos) << m;
    }
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 2.8);
    // The operation itself completes once rank 0 arrives; wait() keeps reporting the timeout.
    const auto t1 = std::chrono::steady_clock::now();
    while (!w->completed() && std::chrono::steady_clock::now() - t1 < std::chrono::seconds(30))
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    EXPECT_TRUE(w->completed());
  }
  EXPECT_EQ(v[0], comm().info().world_size);
  comm().barrier();
}

// ---- the gradient reducer -----------------------------------------------------------------------

namespace {

joule::models::BertConfig tiny() { return joule::test::small_bert(300, 32, 2, 64, 32, /*dropout=*/0.0); }

joule::models::PretrainingBatch rows(const joule::models::PretrainingBatch& b, int64_t begin, int64_t count) {
  joule::models::PretrainingBatch out;
  out.input_ids = b.input_ids.narrow(0, begin, count);
  out.token_type_ids = b.token_type_ids.narrow(0, begin, count);
  out.attention_mask = b.attention_mask.narrow(0, begin, count);
  out.masked_positions = b.masked_positions.narrow(0, begin, count);
  out.masked_ids = b.masked_ids.narrow(0, begin, count);
  out.next_sentence_labels = b.next_sentence_labels.narrow(0, begin, count);
  return out;  // padded rows: no sequence lengths, no rows of a run
}

// Gradients of one process on the whole batch, `accumulation` micro-batches of the rows.
std::vector<torch::Tensor> reference_grads(const joule::models::PretrainingBatch& all, uint64_t seed) {
  joule::models::BertForPreTraining m(tiny(), seed);
  m->forward(all).loss.backward();
  std::vector<torch::Tensor> g;
  for (const auto& [name, p] : m->hf_named_parameters()) g.push_back(p.grad().clone());
  return g;
}

void expect_close(const std::vector<torch::Tensor>& got, const std::vector<torch::Tensor>& want, double rtol,
                  double atol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_TRUE(torch::allclose(got[i], want[i], rtol, atol))
        << "parameter " << i << " max diff " << (got[i] - want[i]).abs().max().item<double>();
}

}  // namespace

TEST(Reducer, WRanksOfBatchBEqualOneRankOfBatchWB) {
  const int n = comm().info().world_size, r = comm().info().rank;
  const int64_t b = 2;
  auto all = joule::models::synthetic_batch(tiny(), n * b, 16, 3, 77);  // every row has 3 predictions
  // Different initial weights per rank: broadcast_parameters must make them rank 0's.
  joule::models::BertForPreTraining model(tiny(), r == 0 ? 5 : 1000 + r);
  ReducerOptions o;
  o.bucket_bytes = 20000;  // several buckets even for this small model
  o.first_bucket_bytes = 4000;
  GradientReducer reducer(model->hf_named_parameters(), comm(), o);
  EXPECT_GT(reducer.buckets().size(), 3u);
  reducer.broadcast_parameters(0);
  reducer.zero_grad();
  reducer.begin_micro_batch(true);
  model->forward(rows(all, r * b, b)).loss.backward();
  reducer.finish();
  std::vector<torch::Tensor> got;
  for (const auto& [name, p] : model->hf_named_parameters()) got.push_back(p.grad());
  expect_close(got, reference_grads(all, 5), 1e-4, 1e-6);
  // Overlap: the first buckets were launched while backward was still running.
  const auto& s = reducer.stats();
  ASSERT_GT(s.launch_seconds.size(), 3u);
  EXPECT_GE(s.launch_seconds[0], 0.0);
  EXPECT_LT(s.launch_seconds[0], s.backward_seconds) << "bucket 0 launched only after backward";
  EXPECT_LE(s.exposed_seconds, s.comm_seconds + 1e-3);
}

TEST(Reducer, AccumulationCommunicatesOnceAndEqualsOneLargeBatch) {
  const int n = comm().info().world_size, r = comm().info().rank;
  const int64_t b = 1, k = 3;
  auto all = joule::models::synthetic_batch(tiny(), n * b * k, 16, 3, 78);
  joule::models::BertForPreTraining model(tiny(), 6);
  GradientReducer reducer(model->hf_named_parameters(), comm());
  reducer.zero_grad();
  for (int64_t m = 0; m < k; ++m) {
    reducer.begin_micro_batch(m == k - 1);
    model->forward(rows(all, (m * n + r) * b, b)).loss.div(static_cast<double>(k)).backward();
    if (m < k - 1) {
      reducer.finish();  // no-op without synchronization
      EXPECT_EQ(reducer.stats().bytes, 0u) << "micro-batch " << m << " communicated";
    }
  }
  reducer.finish();
  EXPECT_GT(reducer.stats().bytes, 0u);
  std::vector<torch::Tensor> got;
  for (const auto& [name, p] : model->hf_named_parameters()) got.push_back(p.grad());
  expect_close(got, reference_grads(all, 6), 1e-4, 1e-6);
}

// A bucket whose all-reduce timed out is still MPI's: the reducer's destructor keeps its memory, and the result that
// a late rank completes the operation with lands there, not in freed memory (freed, ASan's build reports MPI's sends
// reading it: heap-use-after-free in mca_btl_vader_sendi).
TEST(Reducer, ATimedOutBucketStaysMpisAfterTheReducerIsGone) {
  const int n = comm().info().world_size, r = comm().info().rank;
  const float average = (n + 1) / 2.0f;  // of r + 1 over the ranks
  const auto start = std::chrono::steady_clock::now();
  const float* gradient = nullptr;
  {
    std::vector<std::pair<std::string, torch::Tensor>> params{{"w", torch::zeros({64}).set_requires_grad(true)}};
    ReducerOptions o;
    o.timeout_seconds = r == 0 ? 60 : 0.5;
    GradientReducer reducer(params, comm(), o);
    reducer.zero_grad();
    reducer.begin_micro_batch(true);
    if (r == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // past the others' timeout
    (params[0].second * static_cast<float>(r + 1)).sum().backward();           // launches the one bucket
    gradient = params[0].second.grad().data_ptr<float>();
    if (r == 0) {
      reducer.finish();
      EXPECT_EQ(gradient[63], average);
    } else {
      EXPECT_THROW(reducer.finish(), CollectiveTimeout);
    }
  }  // elsewhere than rank 0 the reducer and the parameter go with the all-reduce in flight
  // Rank 0 arrives at 1.5 s and the operation completes on the communicator's thread; a barrier submitted well after
  // (that thread takes the queue's mutex between its tests) orders its writes before the reads below.
  std::this_thread::sleep_until(start + std::chrono::seconds(4));
  comm().barrier();
  if (r != 0) {
    EXPECT_EQ(gradient[0], average);
    EXPECT_EQ(gradient[63], average);
  }
}

TEST(Reducer, Bf16CompressionStaysCloseToFp32) {
  const int n = comm().info().world_size, r = comm().info().rank;
  auto all = joule::models::synthetic_batch(tiny(), n * 2, 16, 3, 79);
  joule::models::BertForPreTraining model(tiny(), 7);
  ReducerOptions o;
  o.compression = Compression::kBFloat16;
  GradientReducer reducer(model->hf_named_parameters(), comm(), o);
  reducer.zero_grad();
  reducer.begin_micro_batch(true);
  model->forward(rows(all, r * 2, 2)).loss.backward();
  reducer.finish();
  std::vector<torch::Tensor> got;
  for (const auto& [name, p] : model->hf_named_parameters()) got.push_back(p.grad());
  // bf16 keeps 8 significant bits of each rank's contribution, so the error is bounded by the
  // contributions' magnitudes, not the (possibly cancelling) average's: |got - want| <=
  // (n + 1) * 2^-8 * mean_r |g_r|, with every rank's local gradients recomputed here.
  const auto want = reference_grads(all, 7);
  std::vector<torch::Tensor> magnitude;
  for (int q = 0; q < n; ++q) {
    auto local = reference_grads(rows(all, q * 2, 2), 7);
    for (size_t i = 0; i < local.size(); ++i) {
      if (q == 0)
        magnitude.push_back(local[i].abs() / n);
      else
        magnitude[i] += local[i].abs() / n;
    }
  }
  double worst_excess = -1;
  bool any_rounding = false;
  for (size_t i = 0; i < got.size(); ++i) {
    const torch::Tensor bound = magnitude[i] * ((n + 1) / 256.0) + 1e-9;
    worst_excess = std::max(worst_excess, ((got[i] - want[i]).abs() - bound).max().item<double>());
    any_rounding |= !torch::equal(got[i], want[i]);
  }
  EXPECT_LE(worst_excess, 0.0) << "an element's error exceeds the bf16 bound";
  EXPECT_TRUE(any_rounding) << "bf16 compression left no trace: was it applied?";
}

// ---- every operation for every dtype, with values exact in each (small integers) ---------------

namespace {

// Encodes small integers in each dtype's bytes and back, so one test body covers every dtype.
struct Codec {
  DType dtype;
  void put(std::vector<uint8_t>& buf, size_t i, double x) const {
    switch (dtype) {
      case DType::kFloat32: {
        float v = static_cast<float>(x);
        std::memcpy(&buf[i * 4], &v, 4);
        break;
      }
      case DType::kFloat64:
        std::memcpy(&buf[i * 8], &x, 8);
        break;
      case DType::kInt32: {
        int32_t v = static_cast<int32_t>(x);
        std::memcpy(&buf[i * 4], &v, 4);
        break;
      }
      case DType::kInt64: {
        int64_t v = static_cast<int64_t>(x);
        std::memcpy(&buf[i * 8], &v, 8);
        break;
      }
      case DType::kBFloat16: {
        uint16_t v = to_bf16(static_cast<float>(x));
        std::memcpy(&buf[i * 2], &v, 2);
        break;
      }
      case DType::kFloat16: {  // small non-negative integers only: exact in fp16
        uint16_t v = 0;
        if (x != 0) {
          int e = 0;
          double m = std::frexp(x, &e);  // x = m * 2^e, m in [0.5, 1)
          v = static_cast<uint16_t>(((e - 1 + 15) << 10) | static_cast<uint16_t>((m * 2 - 1) * 1024));
        }
        std::memcpy(&buf[i * 2], &v, 2);
        break;
      }
    }
  }
  double get(const std::vector<uint8_t>& buf, size_t i) const {
    switch (dtype) {
      case DType::kFloat32: {
        float v;
        std::memcpy(&v, &buf[i * 4], 4);
        return v;
      }
      case DType::kFloat64: {
        double v;
        std::memcpy(&v, &buf[i * 8], 8);
        return v;
      }
      case DType::kInt32: {
        int32_t v;
        std::memcpy(&v, &buf[i * 4], 4);
        return v;
      }
      case DType::kInt64: {
        int64_t v;
        std::memcpy(&v, &buf[i * 8], 8);
        return static_cast<double>(v);
      }
      case DType::kBFloat16: {
        uint16_t v;
        std::memcpy(&v, &buf[i * 2], 2);
        return from_bf16(v);
      }
      case DType::kFloat16: {
        uint16_t v;
        std::memcpy(&v, &buf[i * 2], 2);
        if (v == 0) return 0;
        return std::ldexp(1.0 + (v & 0x3ff) / 1024.0, ((v >> 10) & 0x1f) - 15);
      }
    }
    return 0;
  }
};

}  // namespace

TEST(Collectives, EveryOperationForEveryDtype) {
  const int n = comm().info().world_size, r = comm().info().rank;
  for (DType d : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(dtype_name(d));
    const Codec c{d};
    const size_t k = 5, e = dtype_bytes(d);
    // broadcast from the last rank
    std::vector<uint8_t> b(k * e);
    for (size_t i = 0; i < k; ++i) c.put(b, i, r == n - 1 ? static_cast<double>(i + 3) : 0.0);
    comm().broadcast({b.data(), k, d}, n - 1)->wait();
    for (size_t i = 0; i < k; ++i) EXPECT_EQ(c.get(b, i), static_cast<double>(i + 3));
    // all_gather: rank q's element i is q + i
    std::vector<uint8_t> in(k * e), out(k * e * static_cast<size_t>(n));
    for (size_t i = 0; i < k; ++i) c.put(in, i, r + static_cast<double>(i));
    comm().all_gather({out.data(), k * static_cast<size_t>(n), d}, {in.data(), k, d})->wait();
    for (int q = 0; q < n; ++q)
      for (size_t i = 0; i < k; ++i) EXPECT_EQ(c.get(out, static_cast<size_t>(q) * k + i), q + static_cast<double>(i));
    // reduce_scatter: block q of rank r holds r + q; rank r receives sum_q' (q' + r) = n(n-1)/2 + n r
    std::vector<uint8_t> blocks(k * e * static_cast<size_t>(n)), mine(k * e);
    for (int q = 0; q < n; ++q)
      for (size_t i = 0; i < k; ++i) c.put(blocks, static_cast<size_t>(q) * k + i, static_cast<double>(r + q));
    comm().reduce_scatter({mine.data(), k, d}, {blocks.data(), k * static_cast<size_t>(n), d})->wait();
    for (size_t i = 0; i < k; ++i) EXPECT_EQ(c.get(mine, i), n * (n - 1) / 2.0 + n * r);
    // The same two in place (ZeRO-1's buckets): this rank's block of the whole buffer is the input of the gather and
    // the output of the reduce-scatter.
    const size_t block = static_cast<size_t>(r) * k * e;
    comm().reduce_scatter({blocks.data() + block, k, d}, {blocks.data(), k * static_cast<size_t>(n), d})->wait();
    for (size_t i = 0; i < k; ++i) EXPECT_EQ(c.get(blocks, static_cast<size_t>(r) * k + i), n * (n - 1) / 2.0 + n * r);
    std::vector<uint8_t> gathered(k * e * static_cast<size_t>(n), 0xff);  // other blocks: garbage
    for (size_t i = 0; i < k; ++i) c.put(gathered, static_cast<size_t>(r) * k + i, r + static_cast<double>(i));
    comm().all_gather({gathered.data(), k * static_cast<size_t>(n), d}, {gathered.data() + block, k, d})->wait();
    for (int q = 0; q < n; ++q)
      for (size_t i = 0; i < k; ++i)
        EXPECT_EQ(c.get(gathered, static_cast<size_t>(q) * k + i), q + static_cast<double>(i));
    // all_reduce sum: rank r contributes r + 1 (+ i)
    std::vector<uint8_t> s(k * e);
    for (size_t i = 0; i < k; ++i) c.put(s, i, r + 1.0 + static_cast<double>(i));
    comm().all_reduce({s.data(), k, d})->wait();
    for (size_t i = 0; i < k; ++i) EXPECT_EQ(c.get(s, i), n * (n + 1) / 2.0 + n * static_cast<double>(i));
  }
}

TEST(Collectives, ALargeAllReduceIsARingWithUnevenBlocksInFlightTogether) {
  // From 1 MiB an all-reduce runs as the communicator's ring (collectives/mpi_communicator.cc), here with element
  // counts no world size divides (uneven blocks), three at once as the reducer's buckets are. Whole numbers, so every
  // order of the additions gives the exact sum.
  const int n = comm().info().world_size, r = comm().info().rank;
  for (DType d : {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kBFloat16, DType::kFloat16}) {
    SCOPED_TRACE(dtype_name(d));
    const Codec c{d};
    const size_t e = dtype_bytes(d);
    std::vector<std::vector<uint8_t>> buffers;
    std::vector<WorkHandle> works;
    for (size_t extra : {size_t{1}, size_t{7}, size_t{4099}}) {
      const size_t k = (size_t{1} << 20) / e + extra;
      buffers.emplace_back(k * e);
      for (size_t i = 0; i < k; ++i) c.put(buffers.back(), i, r + 1.0 + static_cast<double>(i % 5));
      works.push_back(comm().all_reduce({buffers.back().data(), k, d}));
    }
    for (auto& w : works) w->wait();
    for (const auto& b : buffers)
      for (size_t i = 0; i < b.size() / e; ++i)
        ASSERT_EQ(c.get(b, i), n * (n + 1) / 2.0 + n * static_cast<double>(i % 5)) << i << " of " << b.size() / e;
  }
  // The average: the ring's sum, scaled.
  std::vector<float> a((size_t{1} << 20) / 4 + 3);
  for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>(r + 1 + i % 3);
  comm().all_reduce({a.data(), a.size(), DType::kFloat32}, {ReduceOp::kAverage, 60.0, "average"})->wait();
  for (size_t i = 0; i < a.size(); ++i) ASSERT_FLOAT_EQ(a[i], (n + 1) / 2.0f + static_cast<float>(i % 3)) << i;
}
