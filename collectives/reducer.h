// DDP-style gradient reducer. Gradients live in flat bucket buffers and each parameter's .grad() is a
// view into its bucket (no copies). Buckets of about 25 MB (the first about 1 MB) are filled in
// reverse parameter order, the order backward produces gradients; a hook after each parameter's
// gradient accumulation marks it ready, and a bucket's all-reduce starts as soon as it is complete,
// in bucket order, while backward goes on. With accumulation, only the last micro-batch of a step
// communicates. finish() waits for everything before the optimizer step.
//
// Sharded (ZeRO stage 1, `ReducerOptions::shard`): every bucket is padded to a multiple of the world size and cut
// into one block per rank; a bucket is reduce-scattered in place instead of all-reduced, so after finish() rank r
// holds the averaged gradients of block r only (the rest of its buckets is undefined), and updates only the
// parameters' elements in its blocks (shard_ranges()). The parameters themselves live in flat buckets of the same
// layout (each parameter a view), and gather_parameters() all-gathers the updated blocks in place.
//
// Sharded with bf16 weights (`ReducerOptions::bf16_parameters`, bf16 mixed precision: the weights the model uses only
// as bf16 matmul operands), as Megatron-LM's distributed optimizer: their buckets hold no other parameters; between
// steps such a parameter is a bf16 view into its bucket, and its fp32 master weights exist only for this rank's block
// (masters()), where the optimizer updates them; gather_parameters() casts the block to bf16 and all-gathers bf16.
// No rank holds those weights whole in fp32, and forward casts none of them. Their gradients stay fp32 in the
// buckets (autograd adds each bf16 gradient into its fp32 bucket view, as the fp32 parameter's cast would), so the
// arithmetic is the fp32-weights run's. hold_bf16_weights() enters that state (TrainStep does, at every step);
// hold_fp32_weights() all-gathers the masters back into whole fp32 parameters for whoever reads them (a checkpoint,
// final/); setting weights (loading, broadcast_parameters) is done while they are fp32.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "collectives/buckets.h"
#include "collectives/communicator.h"
#include "launch/torch_compat.h"

namespace joule::collectives {

enum class Compression { kNone, kBFloat16, kFloat16 };

struct ReducerOptions {
  size_t bucket_bytes = 25u << 20;
  size_t first_bucket_bytes = 1u << 20;
  Compression compression = Compression::kNone;  // dtype of the communicated buffer
  double timeout_seconds = 600;
  bool shard = false;  // ZeRO-1: reduce-scatter the gradients, all-gather the parameters (see above)
  // Sharded: parameters held in bf16 between steps, gathered from fp32 master shards (see above); ignored unsharded.
  std::vector<std::string> bf16_parameters;
};

struct BucketInfo {
  size_t bytes = 0;                 // fp32 gradient bytes (without the padding of a sharded bucket)
  std::vector<std::string> params;  // in the order they sit in the buffer
};

// Figures for the last synchronizing micro-batch.
struct ReducerStats {
  double comm_seconds = 0;             // sum over buckets of launch-to-completion time
  double exposed_seconds = 0;          // how long finish() waited: communication not hidden by backward
  double backward_seconds = 0;         // begin_micro_batch() to finish()
  std::vector<double> launch_seconds;  // per bucket: launch time since begin_micro_batch()
  size_t bytes = 0;                    // bytes communicated (sharded: reduce-scattered)
  double gather_seconds = 0;           // sharded: the parameters' all-gather, launch to the last completion
  size_t gather_bytes = 0;             // sharded: bytes all-gathered (bf16 for the bf16 weights)
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
  // each .grad() (sharded: in this rank's blocks). Rethrows a collective's error (e.g. CollectiveTimeout naming the
  // bucket).
  void finish();
  // Sharded: every rank's updated blocks to every rank (in place), waited for; the bf16 weights' blocks cast from
  // their masters first. Unsharded: nothing to do.
  void gather_parameters();
  // The bf16 weights (if any) as bf16 parameters, their masters taken from this rank's block of the fp32 values (a
  // no-op when already held). Local.
  void hold_bf16_weights();
  // The bf16 weights (if any) whole in fp32 again, all-gathered from the masters (a no-op unless held in bf16).
  // Collective: every rank calls it.
  void hold_fp32_weights();
  // Per parameter, in the constructor's order: the fp32 master of its shard_ranges() elements (1-D, or shaped like
  // the parameter when the range is all of it) for a bf16 weight, undefined for a parameter updated in place.
  const std::vector<torch::Tensor>& masters() const { return masters_; }

  bool sharded() const { return options_.shard; }
  // Per parameter, in the constructor's order: the elements this rank updates (all of them unsharded).
  const std::vector<ShardRange>& shard_ranges() const { return ranges_; }
  const std::vector<BucketInfo>& buckets() const { return info_; }
  // The parameters' indices per bucket (plan_buckets), for plan_shard_ranges at another world size.
  const std::vector<std::vector<size_t>>& bucket_plan() const { return groups_; }
  const ReducerStats& stats() const { return stats_; }

 private:
  struct Bucket;
  void mark_ready(size_t param);
  void launch_ready_buckets();
  void launch(size_t bucket);
  torch::Tensor block_of(const torch::Tensor& flat, int64_t block) const;  // this rank's block of a bucket
  void keep_masters(Bucket& b);
  void hold_parameters_in(Bucket& b, torch::Tensor storage);
  template <class F>
  void retype_bf16_buckets(torch::ScalarType dtype, F retype);  // the bucket's parameters become views of `storage`
  void attach_hooks();  // mark_ready after every parameter's gradient accumulation (again after a dtype change)
  void detach_hooks();
  // Waits for each; where one throws, the reducer's tensors are marked as MPI's until the job ends (abandoned_).
  void wait_all(const std::vector<WorkHandle>& works);

  Communicator& comm_;
  ReducerOptions options_;
  std::vector<std::pair<std::string, torch::Tensor>> params_;
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::vector<BucketInfo> info_;
  std::vector<size_t> bucket_of_;  // parameter index -> bucket
  std::vector<std::vector<size_t>> groups_;
  std::vector<ShardRange> ranges_;
  std::vector<torch::Tensor> masters_;
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
  // A broadcast or gather failed or timed out with operations maybe still in flight: the destructor keeps every tensor
  // they read or write (the error ends the job; freeing them would let a late peer's data land in freed memory).
  bool abandoned_ = false;
};

}  // namespace joule::collectives
