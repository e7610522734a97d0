#include "collectives/reducer.h"

#include "collectives/buckets.h"
#include "launch/cpu_allocator.h"
#include "launch/torch_compat.h"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>

namespace joule::collectives {

using Clock = std::chrono::steady_clock;

struct GradientReducer::Bucket {
  torch::Tensor flat;        // fp32 gradients of this bucket's parameters (sharded: padded to a multiple of the world)
  torch::Tensor wire;        // the communicated buffer: `flat` itself, or a bf16/fp16 copy
  torch::Tensor parameters;  // sharded: the parameters' storage, in the layout of `flat`
  int64_t block = 0;         // sharded: elements per rank
  std::vector<size_t> params;
  size_t pending = 0;  // parameters not yet ready in this synchronizing backward
  WorkHandle work;
};

Buffer buffer_of(const torch::Tensor& t) {
  DType d = DType::kFloat32;
  if (t.scalar_type() == torch::kBFloat16)
    d = DType::kBFloat16;
  else if (t.scalar_type() == torch::kFloat16)
    d = DType::kFloat16;
  else if (t.scalar_type() == torch::kFloat64)
    d = DType::kFloat64;
  // On CUDA, the stream backward (or the copy into the wire buffer) queued the gradients on: the nccl backend waits
  // for it on its own stream.
  return {t.data_ptr(), static_cast<size_t>(t.numel()), d, t.is_cuda() ? static_cast<int>(t.get_device()) : -1,
          launch::compat::current_stream(t.device())};
}

namespace {

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

}  // namespace

GradientReducer::GradientReducer(std::vector<std::pair<std::string, torch::Tensor>> named, Communicator& comm,
                                 ReducerOptions options)
    : comm_(comm), options_(options), params_(std::move(named)), alive_(std::make_shared<bool>(true)) {
  if (params_.empty()) throw joule::InternalError("GradientReducer: no parameters");
  std::vector<int64_t> parameter_bytes;
  for (const auto& [name, p] : params_) {
    if (p.scalar_type() != torch::kFloat32)
      throw joule::InternalError("GradientReducer: parameter '" + name + "' is not float32");
    parameter_bytes.push_back(p.numel() * 4);
  }
  groups_ = plan_buckets(parameter_bytes, options_.bucket_bytes, options_.first_bucket_bytes);
  const std::vector<std::vector<size_t>>& groups = groups_;
  bucket_of_.resize(params_.size());
  const auto wire_type = options_.compression == Compression::kBFloat16  ? torch::kBFloat16
                         : options_.compression == Compression::kFloat16 ? torch::kFloat16
                                                                         : torch::kFloat32;
  std::vector<int64_t> parameter_elements;
  for (const auto& named : params_) parameter_elements.push_back(named.second.numel());
  const int world = options_.shard ? comm_.info().world_size : 1;
  ranges_ = plan_shard_ranges(parameter_elements, groups, world, options_.shard ? comm_.info().rank : 0);
  for (size_t b = 0; b < groups.size(); ++b) {
    auto bucket = std::make_unique<Bucket>();
    int64_t numel = 0;
    for (size_t k : groups[b]) numel += params_[k].second.numel();
    bucket->block = options_.shard ? shard_block(numel, world) : numel;
    const int64_t padded = bucket->block * world;
    const auto& any = params_[groups[b].front()].second;
    bucket->flat = torch::zeros({padded}, any.options());
    bucket->wire = wire_type == torch::kFloat32 ? bucket->flat : torch::zeros({padded}, any.options().dtype(wire_type));
    if (options_.shard) bucket->parameters = torch::zeros({padded}, any.options());
    bucket->params = groups[b];
    BucketInfo info;
    info.bytes = static_cast<size_t>(numel) * 4;
    int64_t offset = 0;
    for (size_t k : groups[b]) {
      torch::Tensor& p = params_[k].second;
      p.mutable_grad() = bucket->flat.narrow(0, offset, p.numel()).view(p.sizes());  // the gradient is a view
      if (options_.shard) {
        torch::NoGradGuard no_grad;
        torch::Tensor storage = bucket->parameters.narrow(0, offset, p.numel()).view(p.sizes());
        storage.copy_(p);
        p.set_data(storage);  // the parameter is a view too: gathered in place
      }
      offset += p.numel();
      bucket_of_[k] = b;
      info.params.push_back(params_[k].first);
    }
    info_.push_back(std::move(info));
    buckets_.push_back(std::move(bucket));
  }
  // The parameters' old storage, freed by set_data above, would stay in the caching allocator's free lists through
  // the first step (its sizes are no activation's): give it back now.
  if (options_.shard) launch::release_all_cpu_blocks();
  // A hook after each parameter's gradient accumulation marks it ready.
  std::weak_ptr<bool> alive = alive_;
  for (size_t k = 0; k < params_.size(); ++k) {
    auto acc = torch::autograd::impl::grad_accumulator(params_[k].second);
    if (!acc) throw joule::InternalError("GradientReducer: parameter '" + params_[k].first + "' does not require grad");
    hook_keys_.push_back(acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
        [this, k, alive](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
          if (alive.lock()) mark_ready(k);
          return outputs;
        })));
    accumulators_.push_back(std::move(acc));
  }
}

GradientReducer::~GradientReducer() {
  *alive_ = false;
  alive_.reset();
  for (size_t k = 0; k < accumulators_.size(); ++k) accumulators_[k]->del_post_hook(hook_keys_[k]);
  for (auto& b : buckets_)
    if (b->work && !b->work->completed()) {
      try {
        b->work->wait();  // never free a buffer MPI may still write to
      } catch (...) {
      }
    }
}

void GradientReducer::broadcast_parameters(int root) {
  torch::NoGradGuard no_grad;
  std::vector<WorkHandle> works;
  for (auto& [name, p] : params_) {
    if (!p.is_contiguous()) throw joule::InternalError("GradientReducer: parameter '" + name + "' is not contiguous");
    CollectiveOptions o;
    o.label = "parameter " + name;
    o.timeout_seconds = options_.timeout_seconds;
    works.push_back(comm_.broadcast(buffer_of(p), root, o));
  }
  for (auto& w : works) w->wait();
}

void GradientReducer::zero_grad() {
  for (auto& b : buckets_) b->flat.zero_();
}

void GradientReducer::begin_micro_batch(bool synchronize) {
  std::lock_guard<std::mutex> lock(ready_mutex_);
  synchronize_ = synchronize;
  next_launch_ = 0;
  for (auto& b : buckets_) {
    b->pending = b->params.size();
    b->work.reset();
  }
  stats_ = ReducerStats{};
  stats_.launch_seconds.assign(buckets_.size(), -1.0);
  begin_ = Clock::now();
}

void GradientReducer::mark_ready(size_t param) {
  if (!synchronize_) return;
  std::lock_guard<std::mutex> lock(ready_mutex_);
  Bucket& b = *buckets_[bucket_of_[param]];
  if (b.pending == 0) return;  // already counted (a parameter used twice is accumulated once)
  if (--b.pending == 0) launch_ready_buckets();
}

// Called with ready_mutex_ held.
void GradientReducer::launch_ready_buckets() {
  while (next_launch_ < buckets_.size() && buckets_[next_launch_]->pending == 0) launch(next_launch_++);
}

void GradientReducer::launch(size_t index) {
  Bucket& b = *buckets_[index];
  CollectiveOptions o;
  o.label = "gradient bucket " + std::to_string(index) + " of " + std::to_string(buckets_.size());
  o.timeout_seconds = options_.timeout_seconds;
  if (options_.compression == Compression::kNone) {
    o.op = ReduceOp::kAverage;
  } else {
    torch::NoGradGuard no_grad;
    b.wire.copy_(b.flat);
    o.op = ReduceOp::kSum;  // averaged in fp32 after the copy back
  }
  stats_.launch_seconds[index] = since(begin_);
  stats_.bytes += static_cast<size_t>(b.wire.numel() * b.wire.element_size());
  if (!options_.shard) {
    b.work = comm_.all_reduce(buffer_of(b.wire), o);
    return;
  }
  // In place: this rank's block of the bucket receives the block's reduction.
  b.work = comm_.reduce_scatter(buffer_of(block_of(b.wire, b.block)), buffer_of(b.wire), o);
}

torch::Tensor GradientReducer::block_of(const torch::Tensor& flat, int64_t block) const {
  return flat.narrow(0, block * comm_.info().rank, block);
}

void GradientReducer::gather_parameters() {
  if (!options_.shard) return;
  const auto t0 = Clock::now();
  std::vector<WorkHandle> works;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    Bucket& b = *buckets_[i];
    CollectiveOptions o;
    o.label = "parameter bucket " + std::to_string(i) + " of " + std::to_string(buckets_.size());
    o.timeout_seconds = options_.timeout_seconds;
    works.push_back(comm_.all_gather(buffer_of(b.parameters), buffer_of(block_of(b.parameters, b.block)), o));
    stats_.gather_bytes += static_cast<size_t>(b.parameters.numel()) * 4;
  }
  for (auto& w : works) w->wait();
  stats_.gather_seconds = since(t0);
}

void GradientReducer::finish() {
  if (!synchronize_) return;
  const auto t0 = Clock::now();
  stats_.backward_seconds = std::chrono::duration<double>(t0 - begin_).count();
  {
    // Buckets whose parameters got no gradient in this backward still take part, in order.
    std::lock_guard<std::mutex> lock(ready_mutex_);
    for (auto& b : buckets_) b->pending = 0;
    launch_ready_buckets();
  }
  for (auto& b : buckets_) {
    b->work->wait();
    stats_.comm_seconds += b->work->seconds();
  }
  stats_.exposed_seconds = since(t0);
  if (options_.compression != Compression::kNone) {
    torch::NoGradGuard no_grad;
    const double scale = 1.0 / comm_.info().world_size;
    for (auto& b : buckets_) {
      if (options_.shard)
        block_of(b->flat, b->block).copy_(block_of(b->wire, b->block)).mul_(scale);
      else
        b->flat.copy_(b->wire).mul_(scale);
    }
  }
  for (size_t k = 0; k < params_.size(); ++k) {
    const torch::Tensor& g = params_[k].second.grad();
    const torch::Tensor& flat = buckets_[bucket_of_[k]]->flat;
    const auto* base = static_cast<const char*>(flat.data_ptr());
    const auto* ptr = g.defined() ? static_cast<const char*>(g.data_ptr()) : nullptr;
    if (!ptr || ptr < base || ptr >= base + flat.numel() * 4)
      throw joule::InternalError(
          "GradientReducer: the gradient of '" + params_[k].first +
          "' no longer lives in its bucket (was zero_grad(set_to_none) or an optimizer resetting .grad() used?)");
  }
  synchronize_ = false;
}

}  // namespace joule::collectives
