#include "tools/bench_comm.h"
#include "trainer/sim/alpha_beta.h"

#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>

#include <nlohmann/json.hpp>

#include <functional>

#include "collectives/communicator.h"
#include "collectives/mpi_check.h"
#include "collectives/mpi_handles.h"
#include "collectives/reducer.h"
#include "launch/runtime.h"
#include "models/bert.h"
#include "tools/bench_deadline.h"
#include "tools/model_commands.h"
#include "tools/stats.h"

namespace joule::tools {
namespace {

using Clock = std::chrono::steady_clock;
using collectives::Buffer;
using collectives::DType;

using launch::seconds_since;

// Every wait of the bench for the other ranks ends within --collective-timeout. The communicator's operations take it
// as their option; the bench's own MPI calls (the ping-pong and its barriers, the one all-reduce the reducer is
// compared with) run on a communicator of the bench's own, with errors returned (MPI_CHECK names them), posted
// nonblocking and tested on this thread until it. On a timeout, what MPI may still write into (the operation's buffer,
// the bench's communicator) is kept to the job's end: the error ends the job.
class Waits {
 public:
  Waits(collectives::Communicator& comm, double timeout_s)
      : comm_(comm), timeout_s_(timeout_s), own_(collectives::dup_comm(MPI_COMM_WORLD)) {
    MPI_CHECK(MPI_Comm_set_errhandler(own_.get(), MPI_ERRORS_RETURN));
  }

  collectives::Communicator& comm() const { return comm_; }
  MPI_Comm own() const { return own_.get(); }
  double timeout_s() const { return timeout_s_; }
  collectives::CollectiveOptions options(const std::string& label) const {
    return {collectives::ReduceOp::kSum, timeout_s_, label};
  }

  // The communicator's barrier.
  void barrier(const std::string& before) const { comm_.barrier(options("before " + before)); }
  // A barrier on the bench's communicator, tested on this thread: every rank leaves it spinning, as from a blocking
  // MPI_Barrier, not woken by the communicator's thread (which a ping-pong's clock would see). `what`: its name.
  void own_barrier(const std::string& what) {
    MPI_Request r;
    MPI_CHECK(MPI_Ibarrier(own(), &r));
    std::vector<char> nothing;
    wait(r, nothing, Clock::now(), what);
  }

  // A communicator operation's wait, `buffer` (what it reads and writes) kept on a timeout.
  template <class T>
  void wait(const collectives::WorkHandle& work, std::vector<T>& buffer) {
    try {
      work->wait();
    } catch (const collectives::CollectiveTimeout&) {
      keep(buffer);
      throw;
    }
  }

  // Tests `request` until it completes or the timeout has passed since `start`: then a CollectiveTimeout naming
  // `what`, the request left in flight.
  template <class T>
  void wait(MPI_Request& request, std::vector<T>& buffer, Clock::time_point start, const std::string& what) {
    int done = 0;
    while (true) {
      MPI_CHECK(MPI_Test(&request, &done, MPI_STATUS_IGNORE));
      if (done) return;
      if (seconds_since(start) > timeout_s_) {
        keep(buffer);
        own_.release();
        throw collectives::CollectiveTimeout(
            collectives::CollectiveTimeout::message(comm_.info().rank, what, timeout_s_, "a rank died or stalled"));
      }
    }
  }

  // The slowest rank's time is the collective's time.
  double max_over_ranks(double seconds, const std::string& of) {
    const auto& info = comm_.info();
    std::vector<double> all(static_cast<size_t>(info.world_size), 0.0);
    all[static_cast<size_t>(info.rank)] = seconds;
    wait(comm_.all_gather({all.data(), all.size(), DType::kFloat64}, {all.data() + info.rank, 1, DType::kFloat64},
                          options("the ranks' times of " + of)),
         all);
    return *std::max_element(all.begin(), all.end());
  }

 private:
  template <class T>
  static void keep(std::vector<T>& buffer) {
    static std::vector<std::vector<T>> kept;  // a moved vector keeps its storage
    kept.push_back(std::move(buffer));
  }

  collectives::Communicator& comm_;
  double timeout_s_;
  collectives::MpiComm own_;
};

double bus_factor(int n) { return n > 1 ? 2.0 * (n - 1) / n : 1.0; }

struct PingPongFit {
  double alpha_s = 0, beta_s_per_byte = 0;
  std::vector<std::pair<int64_t, double>> one_way;       // bytes, seconds (median)
  std::vector<std::pair<int64_t, double>> one_way_best;  // bytes, seconds (the fastest repeat: what the fit uses)
};

// Rank 0 and rank 1 bounce a message back and forth; half the round trip is one hop's time t(n) = α + β n. β is the
// slope between the two largest sizes (4 and 16 MiB), α the smallest's (1 KiB) time: a least-squares
// fit over all sizes would let a shaper's burst allowance (tc tbf lets its first bytes through at line rate) pull α
// below zero. The fit takes each size's fastest repeat: other work on the machine can only add time to a hop, so the
// fastest is the link's own figure (a loaded 2-core host once gave a median α of 1.3 ms against 9 us unloaded).
// Other ranks wait. Rank 0's figures.
PingPongFit ping_pong(Waits& waits, int iterations) {
  PingPongFit fit;
  const int rank = waits.comm().info().rank;
  std::vector<char> buf(size_t{16} << 20);
  for (int64_t bytes = 1024; bytes <= (int64_t{16} << 20); bytes *= 4) {
    // Rank 0 sends first and rank 1 receives first; what each wait is called is built before the timing.
    const std::string what = "ping-pong of " + std::to_string(bytes) + " bytes",
                      before = "barrier 'before a " + what + "'";
    const int peer = 1 - rank;
    const std::string send = what + " (the send to rank " + std::to_string(peer) + ")",
                      receive = what + " (the receive from rank " + std::to_string(peer) + ")";
    const auto hop = [&](bool sending, Clock::time_point t0) {
      MPI_Request r;
      if (sending)
        MPI_CHECK(MPI_Isend(buf.data(), static_cast<int>(bytes), MPI_BYTE, peer, 7, waits.own(), &r));
      else
        MPI_CHECK(MPI_Irecv(buf.data(), static_cast<int>(bytes), MPI_BYTE, peer, 7, waits.own(), &r));
      waits.wait(r, buf, t0, sending ? send : receive);
    };
    std::vector<double> times;
    for (int i = 0; i < iterations + 2; ++i) {
      waits.own_barrier(before);
      const auto t0 = Clock::now();
      if (rank <= 1) {
        hop(rank == 0, t0);
        hop(rank == 1, t0);
      }
      if (i >= 2) times.push_back(seconds_since(t0) / 2);
    }
    fit.one_way.emplace_back(bytes, median(times));
    fit.one_way_best.emplace_back(bytes, *std::min_element(times.begin(), times.end()));
  }
  const auto& small = fit.one_way_best.front();
  const auto& big = fit.one_way_best.back();
  const auto& below = fit.one_way_best[fit.one_way_best.size() - 2];
  fit.beta_s_per_byte = (big.second - below.second) / static_cast<double>(big.first - below.first);
  fit.alpha_s = small.second;  // 1 KiB passes within a shaper's burst: its time is the latency
  return fit;
}

void reducer_versus_one_shot(const CommBenchOptions& o, Waits& waits, nlohmann::json& summary,
                             const std::function<void(const std::string&)>& say);

int measure(const CommBenchOptions& o) {
  auto comm = collectives::create_communicator("mpi");
  Waits waits(*comm, o.collective_timeout_seconds);
  const int n = comm->info().world_size, rank = comm->info().rank;
  launch::set_threads(std::max(1, launch::physical_cores() / comm->info().local_size));
  const bool root = rank == 0;
  auto say = [&](const std::string& s) {
    if (root) std::cout << s << std::flush;
  };
  char line[512];
  if (o.pingpong) {
    if (n < 2) throw UsageError("bench comm --pingpong needs 2 or more ranks");
    if (!o.json)
      std::snprintf(line, sizeof line, "ping-pong rank 0 <-> rank 1, 1 KiB to 16 MiB, median of %d\n", o.iterations),
          say(line);
    const PingPongFit fit = ping_pong(waits, o.iterations);
    for (size_t i = 0; i < fit.one_way.size(); ++i) {
      const auto& [bytes, t] = fit.one_way[i];
      if (o.json)
        say(nlohmann::json({{"pingpong_bytes", bytes},
                            {"one_way_us", t * 1e6},
                            {"best_one_way_us", fit.one_way_best[i].second * 1e6}})
                .dump() +
            "\n");
      else
        std::snprintf(line, sizeof line, "ping-pong %10lld bytes: one way %10.1f us\n", static_cast<long long>(bytes),
                      t * 1e6),
            say(line);
    }
    const nlohmann::json j = {
        {"alpha_s", fit.alpha_s}, {"beta_s_per_byte", fit.beta_s_per_byte}, {"bytes_per_s", 1.0 / fit.beta_s_per_byte}};
    if (o.json)
      say(j.dump() + "\n");
    else
      std::snprintf(line, sizeof line, "fit t = alpha + beta n: alpha %.1f us, 1/beta %.2f MB/s\n", fit.alpha_s * 1e6,
                    1e-6 / fit.beta_s_per_byte),
          say(line);
  }
  const bool predict = o.predict_bytes_per_s > 0;
  const sim::Link link{o.predict_alpha_s, o.predict_bytes_per_s};

  // ---- the table --------------------------------------------------------------------------------
  if (!o.json) {
    std::snprintf(line, sizeof line,
                  "all_reduce (sum, float32) on %d ranks, %d node(s), median of %d\n%14s %12s %12s %12s %8s\n", n,
                  comm->info().node_count, o.iterations, "bytes", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "check");
    say(line);
  }
  double last_busbw = 0;
  int errors = 0;
  for (int64_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= 4) {
    const size_t count = static_cast<size_t>(bytes / 4);
    std::vector<float> v(count);
    // Correctness: rank r contributes r + 1 everywhere; every element must be n(n+1)/2.
    std::fill(v.begin(), v.end(), static_cast<float>(rank + 1));
    const std::string what = "the table's all-reduce of " + std::to_string(bytes) + " bytes";
    waits.wait(comm->all_reduce({v.data(), count, DType::kFloat32}, waits.options(what + " (checked)")), v);
    const float want = n * (n + 1) / 2.0f;
    const bool ok = std::all_of(v.begin(), v.end(), [&](float x) { return x == want; });
    std::vector<double> wrong_ranks{ok ? 0.0 : 1.0};
    waits.wait(
        comm->all_reduce({wrong_ranks.data(), 1, DType::kFloat64}, waits.options("the ranks' checks of " + what)),
        wrong_ranks);
    const bool any_bad = wrong_ranks[0] > 0;
    errors += any_bad;
    std::vector<double> times;
    const collectives::CollectiveOptions timed = waits.options(what);
    for (int i = 0; i < o.warmup + o.iterations; ++i) {
      waits.barrier(what);
      const auto t0 = Clock::now();
      waits.wait(comm->all_reduce({v.data(), count, DType::kFloat32}, timed), v);
      const double t = waits.max_over_ranks(seconds_since(t0), what);
      if (i >= o.warmup) times.push_back(t);
    }
    const double t = median(times), algbw = bytes / t / 1e9, busbw = algbw * bus_factor(n);
    const double best = *std::min_element(times.begin(), times.end());
    last_busbw = busbw;
    const double predicted = predict ? sim::ring_all_reduce_seconds(n, static_cast<double>(bytes), link) : 0;
    if (o.json) {
      nlohmann::json row = {
          {"bytes", bytes}, {"time_us", t * 1e6}, {"algbw", algbw}, {"busbw", busbw}, {"ok", !any_bad}};
      row["best_us"] = best * 1e6;  // the fastest repeat (the others are slower by the machine's other work)
      row["best_busbw"] = bytes / best / 1e9 * bus_factor(n);
      if (predict) {
        row["predicted_us"] = predicted * 1e6;
        row["predicted_busbw"] = sim::all_reduce_bus_bandwidth(static_cast<double>(bytes), predicted, n) / 1e9;
        row["error"] = predicted / t - 1;  // predicted time against measured
      }
      say(row.dump() + "\n");
    } else {
      std::snprintf(line, sizeof line, "%14lld %12.1f %12.3f %12.3f %8s\n", static_cast<long long>(bytes), t * 1e6,
                    algbw, busbw, any_bad ? "WRONG" : "ok");
      say(line);
    }
  }

  nlohmann::json summary = {{"ranks", n}};
  if (o.gradient_model != "none") reducer_versus_one_shot(o, waits, summary, say);
  if (o.json) say(summary.dump() + "\n");

  int code = 0;
  if (errors) {
    say("bench comm: WRONG all-reduce results\n");
    code = 1;
  }
  if (o.min_busbw > 0 && last_busbw < o.min_busbw) {
    std::snprintf(line, sizeof line, "bench comm: busbw %.3f GB/s at the largest size is below --min-busbw %.3f\n",
                  last_busbw, o.min_busbw);
    say(line);
    code = 2;
  }
  return code;
}

// The reducer on a model's gradient against one all-reduce of the same bytes (MPI_Iallreduce, the call the reducer
// makes for each bucket), then (with --overlap-model) the exposed communication of real training steps; figures added
// to `summary`.
void reducer_versus_one_shot(const CommBenchOptions& o, Waits& waits, nlohmann::json& summary,
                             const std::function<void(const std::string&)>& say) {
  collectives::Communicator* comm = &waits.comm();
  const int n = comm->info().world_size, rank = comm->info().rank;
  collectives::ReducerOptions reducer_options;
  reducer_options.timeout_seconds = o.collective_timeout_seconds;
  char line[512];
  const models::BertConfig config = resolve_model_config(o.gradient_model);
  std::vector<std::pair<std::string, torch::Tensor>> params;
  {
    models::BertForPreTraining shapes(config);  // only for the parameter list (names, shapes, order)
    for (const auto& [name, p] : shapes->hf_named_parameters())
      params.emplace_back(name, torch::zeros(p.sizes()).set_requires_grad(true));
  }
  collectives::GradientReducer reducer(params, *comm, reducer_options);
  std::vector<double> reducer_times, oneshot_times;
  size_t grad_bytes = 0;
  for (const auto& b : reducer.buckets()) grad_bytes += b.bytes;
  std::vector<float> flat(grad_bytes / 4, 1.0f);
  const std::string bucketed = "the reducer's buckets", one_shot = "one all-reduce of the gradient's bytes";
  for (int i = 0; i < o.warmup + o.iterations; ++i) {
    waits.barrier(bucketed);
    auto t0 = Clock::now();
    reducer.begin_micro_batch(true);
    reducer.finish();  // launches every bucket in order, waits for all
    const double tr = waits.max_over_ranks(seconds_since(t0), bucketed);
    waits.barrier(one_shot);
    t0 = Clock::now();
    MPI_Request r;
    MPI_CHECK(
        MPI_Iallreduce(MPI_IN_PLACE, flat.data(), static_cast<int>(flat.size()), MPI_FLOAT, MPI_SUM, waits.own(), &r));
    waits.wait(r, flat, t0, one_shot);
    const double to = waits.max_over_ranks(seconds_since(t0), one_shot);
    if (i >= o.warmup) reducer_times.push_back(tr), oneshot_times.push_back(to);
  }
  const double reducer_busbw = grad_bytes / median(reducer_times) / 1e9 * bus_factor(n);
  const double oneshot_busbw = grad_bytes / median(oneshot_times) / 1e9 * bus_factor(n);
  summary.update({{"gradient_model", o.gradient_model},
                  {"gradient_bytes", grad_bytes},
                  {"buckets", reducer.buckets().size()},
                  {"reducer_s", median(reducer_times)},
                  {"oneshot_s", median(oneshot_times)},
                  {"oneshot_call", "MPI_Iallreduce"},  // the call the reducer makes for each bucket
                  {"reducer_busbw", reducer_busbw},
                  {"oneshot_busbw", oneshot_busbw},
                  {"reducer_vs_oneshot", reducer_busbw / oneshot_busbw}});
  if (!o.json) {
    std::snprintf(line, sizeof line,
                  "\n%s gradient, %.2f GB in %zu buckets (25 MB, first 1 MB):\n"
                  "  reducer (bucketed, in order)   %8.3f s   busbw %7.3f GB/s\n"
                  "  one all-reduce (MPI_Iallreduce) %7.3f s   busbw %7.3f GB/s\n"
                  "  reducer / one-shot             %8.2f\n",
                  o.gradient_model.c_str(), grad_bytes / 1e9, reducer.buckets().size(), median(reducer_times),
                  reducer_busbw, median(oneshot_times), oneshot_busbw, reducer_busbw / oneshot_busbw);
    say(line);
  }

  // ---- exposed communication in real training steps ----------------------------------------------
  if (!o.overlap_model.empty()) {
    const models::BertConfig c = resolve_model_config(o.overlap_model);
    models::BertForPreTraining model(c, 1);
    collectives::GradientReducer r(model->hf_named_parameters(), *comm, reducer_options);
    r.broadcast_parameters();
    auto batch = models::synthetic_batch(c, o.overlap_batch, 128, 20, 100 + static_cast<uint64_t>(rank));
    std::vector<double> comm_s, exposed_s, step_s;
    const std::string step = "a training step of " + o.overlap_model;
    for (int i = 0; i < o.overlap_steps + 1; ++i) {
      waits.barrier(step);
      const auto t0 = Clock::now();
      r.zero_grad();
      r.begin_micro_batch(true);
      model->forward(batch).loss.backward();
      r.finish();
      if (i == 0) continue;  // warm-up
      step_s.push_back(waits.max_over_ranks(seconds_since(t0), step));
      comm_s.push_back(waits.max_over_ranks(r.stats().comm_seconds, step + "'s communication"));
      exposed_s.push_back(waits.max_over_ranks(r.stats().exposed_seconds, step + "'s exposed communication"));
    }
    const double fraction = median(exposed_s) / median(comm_s);
    summary["overlap_model"] = o.overlap_model;
    summary["step_s"] = median(step_s);
    summary["comm_s"] = median(comm_s);
    summary["exposed_comm_s"] = median(exposed_s);
    summary["exposed_fraction"] = fraction;
    if (!o.json) {
      std::snprintf(line, sizeof line,
                    "\n%s training step (batch %d x seq 128 per rank), median of %d:\n"
                    "  step %.3f s, communication %.3f s, exposed %.3f s -> exposed fraction %.2f\n",
                    o.overlap_model.c_str(), o.overlap_batch, o.overlap_steps, median(step_s), median(comm_s),
                    median(exposed_s), fraction);
      say(line);
    }
  }
}

}  // namespace

int bench_comm(const CommBenchOptions& o) {
  return naming_the_timeout_flag([&] { return measure(o); }, "its ping-pong, all-reduces or training steps");
}

}  // namespace joule::tools
