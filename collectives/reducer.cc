#include "collectives/reducer.h"

#include <set>

#include "collectives/buckets.h"
#include "launch/cpu_allocator.h"
#include "launch/torch_compat.h"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>

namespace joule::collectives {

using Clock = std::chrono::steady_clock;

struct GradientReducer::Bucket {
  torch::Tensor flat;        // fp32 gradients of this bucket's parameters (sharded: padded to a multiple of the world)
  torch::Tensor wire;        // the communicated buffer: `flat` itself, or a bf16/fp16 copy
  torch::Tensor parameters;  // sharded: the parameters' storage, in the layout of `flat` (fp32, or bf16 while held)
  torch::Tensor master;      // sharded bf16 weights: the fp32 master weights of this rank's block
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
  std::vector<int> kinds(params_.size(), 0);  // 1: a bf16 weight
  std::set<std::string> bf16(options_.bf16_parameters.begin(), options_.bf16_parameters.end());
  for (size_t k = 0; k < params_.size(); ++k) {
    const auto& [name, p] = params_[k];
    if (p.scalar_type() != torch::kFloat32)
      throw joule::InternalError("GradientReducer: parameter '" + name + "' is not float32");
    parameter_bytes.push_back(p.numel() * 4);
    kinds[k] = options_.shard && bf16.erase(name) ? 1 : 0;
  }
  if (options_.shard && !bf16.empty())
    throw joule::InternalError("GradientReducer: bf16 weight '" + *bf16.begin() + "' is no parameter");
  groups_ = plan_buckets(parameter_bytes, options_.bucket_bytes, options_.first_bucket_bytes, kinds);
  const std::vector<std::vector<size_t>>& groups = groups_;
  bucket_of_.resize(params_.size());
  const auto wire_type = options_.compression == Compression::kBFloat16  ? torch::kBFloat16
                         : options_.compression == Compression::kFloat16 ? torch::kFloat16
                                                                         : torch::kFloat32;
  std::vector<int64_t> parameter_elements;
  for (const auto& named : params_) parameter_elements.push_back(named.second.numel());
  const int world = options_.shard ? comm_.info().world_size : 1;
  ranges_ = plan_shard_ranges(parameter_elements, groups, world, options_.shard ? comm_.info().rank : 0);
  masters_.resize(params_.size());
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
    if (options_.shard && kinds[groups[b].front()] == 1) keep_masters(*bucket);
    info_.push_back(std::move(info));
    buckets_.push_back(std::move(bucket));
  }
  // The parameters' old storage, freed by set_data above, would stay in the caching allocator's free lists through
  // the first step (its sizes are no activation's): give it back now.
  if (options_.shard) launch::release_all_cpu_blocks();
  attach_hooks();
}

// A bf16 weights' bucket: the fp32 master weights of this rank's block, and each parameter's shard range in them.
void GradientReducer::keep_masters(Bucket& b) {
  b.master = block_of(b.parameters, b.block).clone();
  int64_t offset = 0;  // the parameter's place in the bucket
  for (size_t k : b.params) {
    const int64_t n = params_[k].second.numel();
    const ShardRange r = ranges_[k];
    if (r.size() > 0) {
      torch::Tensor m = b.master.narrow(0, offset + r.begin - b.block * comm_.info().rank, r.size());
      masters_[k] = r.size() == n ? m.view(params_[k].second.sizes()) : m;
    }
    offset += n;
  }
}

// A hook after each parameter's gradient accumulation marks it ready. set_data with another dtype drops a
// parameter's gradient accumulator (and so its hook): hold_*_weights attach them again.
void GradientReducer::attach_hooks() {
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

void GradientReducer::detach_hooks() {
  for (size_t k = 0; k < accumulators_.size(); ++k) accumulators_[k]->del_post_hook(hook_keys_[k]);
  accumulators_.clear();
  hook_keys_.clear();
}

GradientReducer::~GradientReducer() {
  *alive_ = false;
  alive_.reset();
  detach_hooks();
  // Never free a buffer MPI may still write to: a bucket's operation still in flight is waited for, and where it
  // failed or timed out (so still in flight), every tensor of the reducer is kept to the end of the job, which the
  // error ends.
  for (auto& b : buckets_)
    if (b->work && !b->work->completed()) {
      try {
        b->work->wait();
      } catch (...) {
      }
      abandoned_ = abandoned_ || !b->work->completed();
    }
  if (!abandoned_) return;
  static auto* kept = new std::vector<torch::Tensor>;  // never freed, not even at exit: MPI may still write
  for (auto& b : buckets_)
    for (const torch::Tensor& t : {b->flat, b->wire, b->parameters, b->master})
      if (t.defined()) kept->push_back(t);
  for (auto& [name, p] : params_) kept->push_back(p);
}

void GradientReducer::wait_all(const std::vector<WorkHandle>& works) {
  try {
    for (auto& w : works) w->wait();
  } catch (...) {
    abandoned_ = true;
    throw;
  }
}

void GradientReducer::broadcast_parameters(int root) {
  for (auto& b : buckets_)
    if (b->parameters.defined() && b->parameters.scalar_type() != torch::kFloat)
      throw joule::InternalError("GradientReducer: parameters broadcast while held in bf16");
  torch::NoGradGuard no_grad;
  std::vector<WorkHandle> works;
  for (auto& [name, p] : params_) {
    if (!p.is_contiguous()) throw joule::InternalError("GradientReducer: parameter '" + name + "' is not contiguous");
    CollectiveOptions o;
    o.label = "parameter " + name;
    o.timeout_seconds = options_.timeout_seconds;
    works.push_back(comm_.broadcast(buffer_of(p), root, o));
  }
  wait_all(works);
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
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    Bucket& b = *buckets_[i];
    if (b.master.defined() && b.parameters.scalar_type() != torch::kBFloat16)
      throw joule::InternalError(
          "GradientReducer: gather_parameters with the bf16 weights held in fp32 (the step "
          "must begin with hold_bf16_weights, which takes the masters from them)");
    if (b.master.defined()) block_of(b.parameters, b.block).copy_(b.master);
    CollectiveOptions o;
    o.label = "parameter bucket " + std::to_string(i) + " of " + std::to_string(buckets_.size());
    o.timeout_seconds = options_.timeout_seconds;
    works.push_back(comm_.all_gather(buffer_of(b.parameters), buffer_of(block_of(b.parameters, b.block)), o));
    stats_.gather_bytes += static_cast<size_t>(b.parameters.numel() * b.parameters.element_size());
  }
  wait_all(works);
  stats_.gather_seconds = since(t0);
}

void GradientReducer::hold_parameters_in(Bucket& b, torch::Tensor storage) {
  int64_t offset = 0;
  for (size_t k : b.params) {
    torch::Tensor& p = params_[k].second;
    p.set_data(storage.narrow(0, offset, p.numel()).view(p.sizes()));
    offset += p.numel();
  }
  b.parameters = std::move(storage);
}

// Re-types the bf16 weights' buckets that are not yet `dtype`, one bucket at a time; the hooks are attached again
// whatever happens (an exception leaves each bucket wholly in one dtype).
template <class F>
void GradientReducer::retype_bf16_buckets(torch::ScalarType dtype, F retype) {
  bool any = false;
  for (auto& b : buckets_) any = any || (b->master.defined() && b->parameters.scalar_type() != dtype);
  if (!any) return;
  torch::NoGradGuard no_grad;
  detach_hooks();
  try {
    for (size_t i = 0; i < buckets_.size(); ++i)
      if (buckets_[i]->master.defined() && buckets_[i]->parameters.scalar_type() != dtype) retype(i, *buckets_[i]);
  } catch (...) {
    attach_hooks();
    throw;
  }
  launch::release_all_cpu_blocks();  // the other dtype's buckets
  attach_hooks();
}

void GradientReducer::hold_bf16_weights() {
  retype_bf16_buckets(torch::kBFloat16, [this](size_t, Bucket& b) {
    b.master.copy_(block_of(b.parameters, b.block));  // the weights as they are now (loaded, broadcast, gathered)
    hold_parameters_in(b, b.parameters.to(torch::kBFloat16));
  });
}

void GradientReducer::hold_fp32_weights() {
  retype_bf16_buckets(torch::kFloat, [this](size_t i, Bucket& b) {
    torch::Tensor whole = torch::empty({b.parameters.numel()}, b.master.options());
    block_of(whole, b.block).copy_(b.master);
    CollectiveOptions o;
    o.label = "fp32 weights of parameter bucket " + std::to_string(i) + " of " + std::to_string(buckets_.size());
    o.timeout_seconds = options_.timeout_seconds;
    comm_.all_gather(buffer_of(whole), buffer_of(block_of(whole, b.block)), o)->wait();
    hold_parameters_in(b, whole);
  });
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
