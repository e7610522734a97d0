// `joule bench comm`: an nccl-tests-style all-reduce table (bytes, time, algbw, busbw =
// algbw * 2(n-1)/n, results checked), then the reducer's bucketed all-reduce of a model's gradient
// against one all-reduce of the same bytes, and (with a model) exposed communication in real
// training steps. Run under mpirun; rank 0 prints. Once MPI has started, every wait for the other
// ranks ends within collective_timeout_seconds (a CollectiveTimeout naming the operation and --collective-timeout).
#pragma once

#include <cstdint>
#include <string>

#include "collectives/communicator.h"

namespace joule::tools {

struct CommBenchOptions {
  int64_t min_bytes = 1 << 10;
  int64_t max_bytes = 256 << 20;
  int iterations = 5;
  int warmup = 2;
  std::string gradient_model = "bert-large";  // whose gradient the reducer moves; "none" skips that part
  bool pingpong = false;           // rank 0 <-> rank 1 ping-pong first: one-way times and the α, β they fit
  double predict_alpha_s = 0;      // with predict_bytes_per_s > 0: every table row also gets the ring all-reduce's
  double predict_bytes_per_s = 0;  // α-β time (trainer/sim/alpha_beta.h) and its error against the measured one
  std::string overlap_model;       // "" to skip the training-step measurement
  int overlap_batch = 8;
  int overlap_steps = 3;
  double min_busbw = 0;  // GB/s; below it on the largest table row the command fails
  bool json = false;
  double collective_timeout_seconds = collectives::CollectiveOptions{}.timeout_seconds;
};

// Returns the process exit code (non-zero below --min-busbw).
int bench_comm(const CommBenchOptions& options);

}  // namespace joule::tools
