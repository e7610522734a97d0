#include "trainer/optimizer.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

#include <ATen/record_function.h>

#include "launch/util/options.h"
#include "models/bert.h"
#include "trainer/checkpoint.h"
#include "trainer/lamb_cpu.h"

namespace joule::trainer {

namespace {

// Parameters cut into chunks of this many elements: the unit of parallel work and of partial sums.
constexpr int64_t kChunk = int64_t{1} << 16;

// float32, contiguous and on the CPU, parameter, gradient and moments alike: lamb_cpu's loops apply.
bool cpu_float32(const torch::Tensor& t) {
  return t.device().is_cpu() && t.scalar_type() == torch::kFloat && t.is_contiguous();
}

// f(chunk, begin, end) for every chunk of [0, n), in parallel over the intra-op threads.
template <class F>
void for_chunks(int64_t n, F f) {
  at::parallel_for(0, (n + kChunk - 1) / kChunk, 2, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) f(c, c * kChunk, std::min(n, (c + 1) * kChunk));
  });
}

// The results of f(begin, end) over the chunks (an arithmetic type or lamb_cpu::Norms), summed in chunk order, so
// the sum is the same for any thread count.
template <class F>
auto chunked_sum(int64_t n, F f) {
  using R = decltype(f(int64_t{0}, int64_t{0}));
  std::vector<R> partial(static_cast<size_t>((n + kChunk - 1) / kChunk));
  for_chunks(n, [&](int64_t c, int64_t b, int64_t e) { partial[static_cast<size_t>(c)] = f(b, e); });
  R sum{};
  for (const R& p : partial) sum += p;
  return sum;
}

// The values of 0-dim or 1-D float64 tensors, concatenated: one copy to the host for all of them (on a GPU, one
// synchronisation instead of one per tensor).
std::vector<double> read_doubles(const std::vector<torch::Tensor>& sums) {
  if (sums.empty()) return {};
  std::vector<torch::Tensor> flat;
  for (const torch::Tensor& t : sums) flat.push_back(t.reshape({-1}));
  const torch::Tensor host = torch::cat(flat).to(torch::kCPU, torch::kFloat64).contiguous();
  const double* v = host.data_ptr<double>();
  return std::vector<double>(v, v + host.numel());
}

// The sums of squares of `tensors` in double (0 for an undefined one): lamb_cpu's loops for CPU float32 tensors,
// tensor ops for the others, whose sums are read together.
std::vector<double> squared_norms(const std::vector<torch::Tensor>& tensors) {
  std::vector<double> out(tensors.size(), 0.0);
  std::vector<torch::Tensor> unread;
  std::vector<size_t> where;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const torch::Tensor& t = tensors[i];
    if (!t.defined()) continue;
    if (cpu_float32(t)) {
      const float* x = t.data_ptr<float>();
      out[i] = chunked_sum(t.numel(), [x](int64_t b, int64_t e) { return lamb_cpu::sum_squares(x + b, e - b); });
    } else {
      unread.push_back(t.square().sum(torch::kFloat64));
      where.push_back(i);
    }
  }
  const std::vector<double> read = read_doubles(unread);
  for (size_t k = 0; k < where.size(); ++k) out[where[k]] = read[k];
  return out;
}

// A tensor's elements [begin, begin + count) as a 1-D tensor: a view of a contiguous one (parameters, moments,
// gradients in their buckets), a copy of another.
torch::Tensor elements(const torch::Tensor& t, int64_t begin, int64_t count) {
  return t.reshape({-1}).narrow(0, begin, count);
}

// The part of a parameter-shaped tensor (the parameter, its gradient) a slot updates: the tensor itself when the slot
// is whole (any layout), else a 1-D view of its elements (sharded parameters live in contiguous buckets).
torch::Tensor part_of(const torch::Tensor& t, int64_t begin, int64_t count) {
  return begin == 0 && count == t.numel() ? t : elements(t, begin, count);
}

}  // namespace

Optimizer::Optimizer(std::vector<std::pair<std::string, torch::Tensor>> params, OptimizerOptions options,
                     OptimizerShard shard)
    : options_(std::move(options)), shard_sum_(std::move(shard.sum_over_ranks)) {
  if (options_.beta1 < 0 || options_.beta1 >= 1 || options_.beta2 < 0 || options_.beta2 >= 1 || options_.eps <= 0)
    throw RunConfigError("optimizer: betas must be in [0, 1) and eps positive");
  if ((!shard.ranges.empty() && shard.ranges.size() != params.size()) ||
      (!shard.masters.empty() && shard.masters.size() != params.size()))
    throw joule::InternalError("optimizer: " + std::to_string(shard.ranges.size()) + " shard ranges and " +
                               std::to_string(shard.masters.size()) + " masters for " + std::to_string(params.size()) +
                               " parameters");
  for (size_t k = 0; k < params.size(); ++k) {
    auto& [name, p] = params[k];
    ParameterState s;
    s.name = name;
    s.param = p;
    const collectives::ShardRange r = shard.ranges.empty() ? collectives::ShardRange{0, p.numel()} : shard.ranges[k];
    if (r.begin < 0 || r.end < r.begin || r.end > p.numel())
      throw joule::InternalError("optimizer: shard range of '" + name + "' outside the parameter");
    s.begin = r.begin;
    s.count = r.size();
    const bool whole = s.count == p.numel();
    if (!whole && !p.is_contiguous())
      throw joule::InternalError("optimizer: sharded parameter '" + name + "' is not contiguous");
    if (!shard.masters.empty() && shard.masters[k].defined()) {
      s.master = shard.masters[k];
      if (s.master.numel() != s.count || s.master.scalar_type() != torch::kFloat || !s.master.is_contiguous())
        throw joule::InternalError("optimizer: the master of '" + name + "' is no contiguous fp32 range");
    }
    const auto fp32 = p.options().dtype(torch::kFloat);
    s.exp_avg = whole ? torch::zeros(p.sizes(), fp32) : torch::zeros({s.count}, fp32);
    s.exp_avg_sq = torch::zeros_like(s.exp_avg);
    s.decay = !models::is_no_decay_parameter(name);
    slots_.push_back(std::move(s));
  }
}

std::vector<StatePiece> Optimizer::state() const {
  std::vector<StatePiece> out;
  for (const ParameterState& s : slots_) {
    out.push_back({"exp_avg." + s.name, s.begin, s.param.numel(), s.exp_avg});
    out.push_back({"exp_avg_sq." + s.name, s.begin, s.param.numel(), s.exp_avg_sq});
  }
  return out;
}

double Optimizer::state_bytes() const {
  double bytes = 0;
  for (const ParameterState& s : slots_)
    bytes += static_cast<double>((s.exp_avg.numel() + s.exp_avg_sq.numel()) * s.exp_avg.element_size());
  return bytes;
}

void Optimizer::load_state(const StateReader& read, int64_t steps) {
  torch::NoGradGuard no_grad;
  for (ParameterState& s : slots_)
    for (auto [prefix, moment] : {std::make_pair("exp_avg.", &s.exp_avg), std::make_pair("exp_avg_sq.", &s.exp_avg_sq)})
      read({prefix + s.name, s.begin, s.param.numel(), moment->view({-1})});
  steps_ = steps;
}

void Optimizer::load_state(const std::vector<std::pair<std::string, torch::Tensor>>& state, int64_t steps) {
  std::map<std::string, torch::Tensor> by_name(state.begin(), state.end());
  load_state(
      [&](const StatePiece& want) {
        auto it = by_name.find(want.name);
        if (it == by_name.end()) throw CheckpointError("optimizer state has no '" + want.name + "'");
        if (it->second.numel() != want.numel)
          throw CheckpointError("optimizer state '" + want.name + "' has another shape than the parameter");
        want.values.copy_(elements(it->second, want.begin, want.values.numel()));
      },
      steps);
}

void Optimizer::reset() {
  for (ParameterState& s : slots_) {
    s.exp_avg.zero_();
    s.exp_avg_sq.zero_();
  }
  steps_ = 0;
}

double Optimizer::step(double lr) {
  RECORD_FUNCTION("joule::optimizer_step", std::vector<c10::IValue>());  // one row in `bench train --profile`
  torch::NoGradGuard no_grad;
  // The global norm before clipping: per-parameter sums of squares (over this rank's parts, then over the ranks),
  // added in double in parameter order, one read of each gradient.
  const auto active = [](const ParameterState& s) { return s.param.grad().defined() && s.count > 0; };
  std::vector<torch::Tensor> grads(slots_.size());
  for (size_t i = 0; i < slots_.size(); ++i)
    if (active(slots_[i])) grads[i] = part_of(slots_[i].param.grad(), slots_[i].begin, slots_[i].count);
  std::vector<double> grad_sq = squared_norms(grads);
  if (shard_sum_) shard_sum_(grad_sq);
  double sum = 0;
  for (double v : grad_sq) sum += v;
  const double norm = std::sqrt(sum);
  if (!std::isfinite(norm)) return norm;  // NaN/Inf gradients: nothing changes, not even the step count
  const double grad_scale =
      (options_.max_grad_norm > 0 && norm > options_.max_grad_norm) ? options_.max_grad_norm / norm : 1.0;
  ++steps_;
  const double c1 = 1.0 - std::pow(options_.beta1, static_cast<double>(steps_));
  const double c2 = 1.0 - std::pow(options_.beta2, static_cast<double>(steps_));
  std::vector<size_t> updated;
  for (size_t i = 0; i < slots_.size(); ++i)
    if (active(slots_[i])) updated.push_back(i);
  std::vector<double> norms(2 * slots_.size(), 0.0);  // ||u||², ||w||² per parameter
  update_moments(updated, lr, c1, c2, grad_scale, norms);
  if (shard_sum_ && needs_norms()) shard_sum_(norms);
  apply_updates(updated, lr, c1, c2, norms);
  return norm;
}

double Optimizer::parameter_norm() const {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> params;
  for (const ParameterState& s : slots_) params.push_back(s.param);
  double sum = 0;
  for (double v : squared_norms(params)) sum += v;
  return std::sqrt(sum);
}

torch::Tensor Optimizer::weights(const ParameterState& s) {
  return s.master.defined() ? s.master : part_of(s.param, s.begin, s.count);
}

namespace {

class Lamb : public Optimizer {
 public:
  Lamb(std::vector<std::pair<std::string, torch::Tensor>> p, OptimizerOptions o, OptimizerShard shard)
      : Optimizer(std::move(p), std::move(o), std::move(shard)) {}

 protected:
  bool needs_norms() const override { return true; }

  // CPU float32 slots through lamb_cpu's loops, one slot at a time; the others (a GPU's) all at once in multi-tensor
  // ops: a few kernels for every parameter together, not ~20 per parameter, and their norms read in one copy.
  void update_moments(const std::vector<size_t>& active, double lr, double c1, double c2, double grad_scale,
                      std::vector<double>& norms) override {
    tensor_op_slots_.clear();
    for (size_t i : active) {
      if (!fused(slots_[i])) {
        tensor_op_slots_.push_back(i);
        continue;
      }
      const std::pair<double, double> n = fused_moments(slots_[i], lr, c1, c2, grad_scale);
      norms[2 * i] = n.first;
      norms[2 * i + 1] = n.second;
    }
    if (!tensor_op_slots_.empty()) tensor_op_moments(c1, c2, grad_scale, norms);
  }

  void apply_updates(const std::vector<size_t>& active, double lr, double c1, double c2,
                     const std::vector<double>& norms) override {
    for (size_t i : active)
      if (fused(slots_[i]) && trust(slots_[i])) fused_apply(slots_[i], lr, c1, c2, ratio(norms, i));
    if (tensor_op_slots_.empty()) return;
    // w -= lr * ratio * u, the directions pass 1 kept.
    std::vector<torch::Tensor> w;
    std::vector<at::Scalar> step;
    for (size_t i : tensor_op_slots_) {
      w.push_back(weights(slots_[i]));
      step.emplace_back(-lr * (trust(slots_[i]) ? ratio(norms, i) : 1.0));
    }
    at::_foreach_mul_(directions_, step);
    at::_foreach_add_(w, directions_);
    directions_.clear();
    tensor_op_slots_.clear();
  }

 private:
  bool trust(const ParameterState& s) const { return s.decay && options_.weight_decay != 0; }
  static bool fused(const ParameterState& s) {
    return cpu_float32(weights(s)) && cpu_float32(s.param.grad()) && cpu_float32(s.exp_avg) &&
           cpu_float32(s.exp_avg_sq);
  }
  // The trust ratio ||w|| / ||u|| of slot i (1 where either norm is 0).
  static double ratio(const std::vector<double>& norms, size_t i) {
    const double update_sq = norms[2 * i], param_sq = norms[2 * i + 1];
    return param_sq > 0 && update_sq > 0 ? std::sqrt(param_sq / update_sq) : 1.0;
  }

  // One CPU float32 slot's pass 1: the moments, and ||u||², ||w||² where the step has a trust ratio (the step is
  // then pass 2's); without one the step is applied here.
  std::pair<double, double> fused_moments(ParameterState& s, double lr, double c1, double c2, double grad_scale) {
    const lamb_cpu::Hyperparameters h = hyper(s, c1, c2, grad_scale);
    const float* g = s.param.grad().data_ptr<float>() + s.begin;
    float *m = s.exp_avg.data_ptr<float>(), *v = s.exp_avg_sq.data_ptr<float>(), *p = weights(s).data_ptr<float>();
    if (!trust(s)) {
      const float step = static_cast<float>(lr);
      for_chunks(s.count, [&](int64_t, int64_t b, int64_t e) {
        lamb_cpu::moments_and_apply(g + b, m + b, v + b, p + b, e - b, h, step);
      });
      return {0.0, 0.0};
    }
    const lamb_cpu::Norms n = chunked_sum(s.count, [&](int64_t b, int64_t e) {
      return lamb_cpu::moments_and_norms(g + b, m + b, v + b, p + b, e - b, h);
    });
    return {n.update_sq, n.param_sq};
  }
  void fused_apply(ParameterState& s, double lr, double c1, double c2, double ratio) {
    const lamb_cpu::Hyperparameters h = hyper(s, c1, c2, 1.0);
    const float *m = s.exp_avg.data_ptr<float>(), *v = s.exp_avg_sq.data_ptr<float>();
    float* p = weights(s).data_ptr<float>();
    const float step = static_cast<float>(lr * ratio);
    for_chunks(s.count, [&](int64_t, int64_t b, int64_t e) { lamb_cpu::apply(p + b, m + b, v + b, e - b, h, step); });
  }

  // Pass 1 of tensor_op_slots_ in multi-tensor ops: the moments, the directions
  // u = (m / c1) / (sqrt(v / c2) + eps) (+ weight_decay w) kept for pass 2, and ||u||², ||w||² of the trust-ratio
  // slots (float32 norms, squared in double).
  void tensor_op_moments(double c1, double c2, double grad_scale, std::vector<double>& norms) {
    std::vector<torch::Tensor> g, m, v, decay_u, decay_w;
    for (size_t i : tensor_op_slots_) {
      const ParameterState& s = slots_[i];
      g.push_back(part_of(s.param.grad(), s.begin, s.count));
      m.push_back(s.exp_avg);
      v.push_back(s.exp_avg_sq);
    }
    if (grad_scale != 1.0) g = at::_foreach_mul(g, grad_scale);
    const double b1 = options_.beta1, b2 = options_.beta2;
    at::_foreach_mul_(m, b1);
    at::_foreach_add_(m, g, 1.0 - b1);
    at::_foreach_mul_(v, b2);
    at::_foreach_addcmul_(v, g, g, 1.0 - b2);
    g.clear();  // the scaled gradients, when clipping made them: freed before the directions are made
    std::vector<torch::Tensor> denom = at::_foreach_div(v, c2);
    at::_foreach_sqrt_(denom);
    at::_foreach_add_(denom, options_.eps);
    directions_ = at::_foreach_div(m, c1);
    at::_foreach_div_(directions_, denom);
    denom.clear();
    std::vector<size_t> trusted;
    for (size_t k = 0; k < tensor_op_slots_.size(); ++k)
      if (trust(slots_[tensor_op_slots_[k]])) {
        decay_u.push_back(directions_[k]);
        decay_w.push_back(weights(slots_[tensor_op_slots_[k]]));
        trusted.push_back(tensor_op_slots_[k]);
      }
    if (trusted.empty()) return;
    at::_foreach_add_(decay_u, decay_w, options_.weight_decay);
    std::vector<torch::Tensor> sums = at::_foreach_norm(decay_u);
    for (torch::Tensor& n : at::_foreach_norm(decay_w)) sums.push_back(n);
    const std::vector<double> read = read_doubles(sums);
    for (size_t k = 0; k < trusted.size(); ++k) {
      norms[2 * trusted[k]] = read[k] * read[k];
      norms[2 * trusted[k] + 1] = read[trusted.size() + k] * read[trusted.size() + k];
    }
  }

  lamb_cpu::Hyperparameters hyper(const ParameterState& s, double c1, double c2, double grad_scale) const {
    return {static_cast<float>(options_.beta1),
            static_cast<float>(options_.beta2),
            static_cast<float>(1.0 - options_.beta1),
            static_cast<float>(1.0 - options_.beta2),
            static_cast<float>(c1),
            static_cast<float>(c2),
            static_cast<float>(options_.eps),
            trust(s) ? static_cast<float>(options_.weight_decay) : 0.0f,
            static_cast<float>(grad_scale)};
  }

  std::vector<size_t> tensor_op_slots_;    // this step's slots in multi-tensor ops, between the two passes
  std::vector<torch::Tensor> directions_;  // their update directions u, same order
};

class AdamW : public Optimizer {
 public:
  AdamW(std::vector<std::pair<std::string, torch::Tensor>> p, OptimizerOptions o, OptimizerShard shard)
      : Optimizer(std::move(p), std::move(o), std::move(shard)) {}

 protected:
  bool needs_norms() const override { return false; }
  // The moments in tensor ops (any device), slot by slot.
  void update_moments(const std::vector<size_t>& active, double, double, double, double grad_scale,
                      std::vector<double>&) override {
    const double b1 = options_.beta1, b2 = options_.beta2;
    for (size_t i : active) {
      ParameterState& s = slots_[i];
      torch::Tensor g = part_of(s.param.grad(), s.begin, s.count);
      if (grad_scale != 1.0) g = g * grad_scale;
      s.exp_avg.mul_(b1).add_(g, 1.0 - b1);
      s.exp_avg_sq.mul_(b2).addcmul_(g, g, 1.0 - b2);
    }
  }
  void apply_updates(const std::vector<size_t>& active, double lr, double c1, double c2,
                     const std::vector<double>&) override {
    for (size_t i : active) {
      const ParameterState& s = slots_[i];
      torch::Tensor p = weights(s);
      if (s.decay && options_.weight_decay != 0) p.mul_(1.0 - lr * options_.weight_decay);
      p.addcdiv_(s.exp_avg, (s.exp_avg_sq / c2).sqrt_().add_(options_.eps), -lr / c1);
    }
  }
};

}  // namespace

std::unique_ptr<Optimizer> create_optimizer(const OptimizerOptions& options,
                                            std::vector<std::pair<std::string, torch::Tensor>> params,
                                            OptimizerShard shard) {
  if (options.name == OptimizerName::lamb) return std::make_unique<Lamb>(std::move(params), options, std::move(shard));
  return std::make_unique<AdamW>(std::move(params), options, std::move(shard));
}

double learning_rate(double base_lr, int64_t step, int64_t total_steps, double warmup_fraction, double power) {
  if (total_steps <= 0) throw joule::InternalError("learning rate schedule: total steps must be positive");
  const double progress = static_cast<double>(step) / static_cast<double>(total_steps);
  if (progress < warmup_fraction) return base_lr * progress / warmup_fraction;
  if (progress >= 1.0) return 0.0;
  return base_lr * std::pow((1.0 - progress) / (1.0 - warmup_fraction), power);
}

}  // namespace joule::trainer
