// DDP-style gradient reducer. Gradients live in flat bucket buffers and each parameter's .grad() is a
// view into its bucket (no copies). Buckets of about 25 MB (the first about 1 MB) are filled in
// reverse parameter order, the order backward produces gradients; a hook after each parameter's
// gradient accumulation marks it ready, and a bucket's all-reduce starts as soon as it is complete,
// in bucket order, while backward goes on. With accumulation, only the last micro-batch of a step
// communicates. finish() waits for everything before the optimizer step.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "collectives/communicator.h"
#include "launch/torch_compat.h"

namespace joule::collectives {

enum class Compression { kNone, kBFloat16, kFloat16 };

struct ReducerOptions {
  size_t bucket_bytes = 25u << 20;
  size_t first_bucket_bytes = 1u << 20;
  Compression compression = Compression::kNone;  // dtype of the communicated buffer
  double timeout_seconds = 600;
};

struct BucketInfo {
  size_t bytes = 0;                 // fp32 gradient bytes
  std::vector<std::string> params;  // in the order they sit in the buffer
};

// Figures for the last synchronizing micro-batch.
struct ReducerStats {
  double comm_seconds = 0;             // sum over buckets of launch-to-completion time
  double exposed_seconds = 0;          // how long finish() waited: communication not hidden by backward
  double backward_seconds = 0;         // begin_micro_batch() to finish()
  std::vector<double> launch_seconds;  // per bucket: launch time since begin_micro_batch()
  size_t bytes = 0;                    // bytes communicated
};

// A tensor's memory as a communicator Buffer: its dtype (fp32, bf16, fp16, fp64), its device, and on CUDA the stream
// that wrote it (the nccl backend waits for that stream on its own).
Buffer buffer_of(const torch::Tensor& t);

class GradientReducer {
 public:
  GradientReducer(std::vector<std::pair<std::string, torch::Tensor>> named_parameters, Communicator& comm,
                  ReducerOptions options = {});
  ~GradientReducer();
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  // Copies rank `root`'s parameters to every rank (do once, before training).
  void broadcast_parameters(int root = 0);
  // Zeroes the gradient buckets in place (gradients stay views into them).
  void zero_grad();
  // Call before each micro-batch's backward; `synchronize` on the last micro-batch of a step.
  void begin_micro_batch(bool synchronize);
  // After backward: launches what is left, waits for every bucket, and leaves the global average in
  // each .grad(). Rethrows a collective's error (e.g. CollectiveTimeout naming the bucket).
  void finish();

  const std::vector<BucketInfo>& buckets() const { return info_; }
  const ReducerStats& stats() const { return stats_; }

 private:
  struct Bucket;
  void mark_ready(size_t param);
  void launch_ready_buckets();
  void launch(size_t bucket);

  Communicator& comm_;
  ReducerOptions options_;
  std::vector<std::pair<std::string, torch::Tensor>> params_;
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::vector<BucketInfo> info_;
  std::vector<size_t> bucket_of_;  // parameter index -> bucket
  std::vector<launch::compat::GradAccumulatorPtr> accumulators_;
  std::vector<uintptr_t> hook_keys_;
  // Autograd may run the hooks (mark_ready) on a device thread while the main thread is in begin/finish: the
  // readiness counters and the launch order are guarded by one mutex.
  std::mutex ready_mutex_;
  std::atomic<bool> synchronize_{false};
  size_t next_launch_ = 0;
  std::chrono::steady_clock::time_point begin_;
  ReducerStats stats_;
  std::shared_ptr<bool> alive_;
};

}  // namespace joule::collectives
