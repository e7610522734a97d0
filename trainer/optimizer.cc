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

Optimizer::Optimizer(std::vector<std::pair<std::string, torch::Tensor>> params, OptimizerOptions options)
    : options_(std::move(options)) {
  if (options_.beta1 < 0 || options_.beta1 >= 1 || options_.beta2 < 0 || options_.beta2 >= 1 || options_.eps <= 0)
    throw ConfigError("optimizer: betas must be in [0, 1) and eps positive");
  for (auto& [name, p] : params) {
    Slot s;
    s.name = name;
    s.param = p;
    s.exp_avg = torch::zeros_like(p, torch::MemoryFormat::Contiguous);
    s.exp_avg_sq = torch::zeros_like(p, torch::MemoryFormat::Contiguous);
    s.decay = !models::is_no_decay_parameter(name);
    slots_.push_back(std::move(s));
  }
}

std::vector<std::pair<std::string, torch::Tensor>> Optimizer::state() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const Slot& s : slots_) {
    out.emplace_back("exp_avg." + s.name, s.exp_avg);
    out.emplace_back("exp_avg_sq." + s.name, s.exp_avg_sq);
  }
  return out;
}

void Optimizer::load_state(const std::vector<std::pair<std::string, torch::Tensor>>& state, int64_t steps) {
  torch::NoGradGuard no_grad;
  std::map<std::string, torch::Tensor> by_name(state.begin(), state.end());
  for (Slot& s : slots_) {
    for (auto [prefix, dst] : {std::make_pair("exp_avg.", &s.exp_avg), std::make_pair("exp_avg_sq.", &s.exp_avg_sq)}) {
      auto it = by_name.find(prefix + s.name);
      if (it == by_name.end()) throw CheckpointError("optimizer state has no '" + std::string(prefix) + s.name + "'");
      if (it->second.sizes() != dst->sizes())
        throw CheckpointError("optimizer state '" + std::string(prefix) + s.name +
                              "' has another shape than the parameter");
      dst->copy_(it->second);
    }
  }
  steps_ = steps;
}

void Optimizer::reset() {
  for (Slot& s : slots_) {
    s.exp_avg.zero_();
    s.exp_avg_sq.zero_();
  }
  steps_ = 0;
}

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

double squared_norm(const torch::Tensor& g) {
  if (!cpu_float32(g)) {
    const double n = g.norm().item<double>();
    return n * n;
  }
  const float* x = g.data_ptr<float>();
  return chunked_sum(g.numel(), [x](int64_t b, int64_t e) { return lamb_cpu::sum_squares(x + b, e - b); });
}

}  // namespace

double Optimizer::step(double lr) {
  RECORD_FUNCTION("joule::optimizer_step", std::vector<c10::IValue>());  // one row in `bench train --profile`
  torch::NoGradGuard no_grad;
  // The global norm before clipping: per-parameter sums of squares added in double, one read of each gradient.
  double sum = 0;
  for (const Slot& s : slots_)
    if (s.param.grad().defined()) sum += squared_norm(s.param.grad());
  const double norm = std::sqrt(sum);
  if (!std::isfinite(norm)) return norm;  // NaN/Inf gradients: nothing changes, not even the step count
  const double grad_scale =
      (options_.max_grad_norm > 0 && norm > options_.max_grad_norm) ? options_.max_grad_norm / norm : 1.0;
  ++steps_;
  const double c1 = 1.0 - std::pow(options_.beta1, static_cast<double>(steps_));
  const double c2 = 1.0 - std::pow(options_.beta2, static_cast<double>(steps_));
  for (Slot& s : slots_)
    if (s.param.grad().defined()) update_slot(s, lr, c1, c2, grad_scale);
  return norm;
}

double Optimizer::parameter_norm() const {
  torch::NoGradGuard no_grad;
  double sum = 0;
  for (const Slot& s : slots_) sum += squared_norm(s.param);
  return std::sqrt(sum);
}

void Optimizer::update_slot(Slot& s, double lr, double c1, double c2, double grad_scale) {
  torch::Tensor& g = s.param.mutable_grad();
  if (grad_scale != 1.0) g.mul_(grad_scale);
  const double b1 = options_.beta1, b2 = options_.beta2;
  s.exp_avg.mul_(b1).add_(g, 1.0 - b1);
  s.exp_avg_sq.mul_(b2).addcmul_(g, g, 1.0 - b2);
  apply_update(s, lr, c1, c2);
}

namespace {

class Lamb : public Optimizer {
 public:
  Lamb(std::vector<std::pair<std::string, torch::Tensor>> p, OptimizerOptions o)
      : Optimizer(std::move(p), std::move(o)) {}

 protected:
  void update_slot(Slot& s, double lr, double c1, double c2, double grad_scale) override {
    const torch::Tensor& g = s.param.grad();
    if (!(cpu_float32(s.param) && cpu_float32(g) && cpu_float32(s.exp_avg) && cpu_float32(s.exp_avg_sq))) {
      Optimizer::update_slot(s, lr, c1, c2, grad_scale);
      return;
    }
    const bool trust = s.decay && options_.weight_decay != 0;
    const lamb_cpu::Hyper h{static_cast<float>(options_.beta1),
                            static_cast<float>(options_.beta2),
                            static_cast<float>(1.0 - options_.beta1),
                            static_cast<float>(1.0 - options_.beta2),
                            static_cast<float>(c1),
                            static_cast<float>(c2),
                            static_cast<float>(options_.eps),
                            trust ? static_cast<float>(options_.weight_decay) : 0.0f,
                            static_cast<float>(grad_scale)};
    const float* gp = g.data_ptr<float>();
    float *m = s.exp_avg.data_ptr<float>(), *v = s.exp_avg_sq.data_ptr<float>(), *p = s.param.data_ptr<float>();
    const int64_t n = s.param.numel();
    if (!trust) {
      const float step = static_cast<float>(lr);
      for_chunks(n, [&](int64_t, int64_t b, int64_t e) {
        lamb_cpu::moments_and_apply(gp + b, m + b, v + b, p + b, e - b, h, step);
      });
      return;
    }
    // Pass 1 writes the moments and sums ||u||² and ||w||²; pass 2 applies the step scaled by the trust ratio.
    const lamb_cpu::Norms norms = chunked_sum(
        n, [&](int64_t b, int64_t e) { return lamb_cpu::moments_and_norms(gp + b, m + b, v + b, p + b, e - b, h); });
    const double ratio = norms.param_sq > 0 && norms.update_sq > 0 ? std::sqrt(norms.param_sq / norms.update_sq) : 1.0;
    const float step = static_cast<float>(lr * ratio);
    for_chunks(n, [&](int64_t, int64_t b, int64_t e) { lamb_cpu::apply(p + b, m + b, v + b, e - b, h, step); });
  }

  void apply_update(Slot& s, double lr, double c1, double c2) override {
    // Two temporaries the size of the parameter, the same arithmetic as (m / c1) / (sqrt(v / c2) + eps).
    torch::Tensor denom = (s.exp_avg_sq / c2).sqrt_().add_(options_.eps);
    torch::Tensor update = (s.exp_avg / c1).div_(denom);
    denom = torch::Tensor();
    double ratio = 1.0;
    if (s.decay && options_.weight_decay != 0) {
      update.add_(s.param, options_.weight_decay);
      const double w = s.param.norm().item<double>(), u = update.norm().item<double>();
      if (w > 0 && u > 0) ratio = w / u;
    }
    s.param.add_(update, -lr * ratio);
  }
};

class AdamW : public Optimizer {
 public:
  AdamW(std::vector<std::pair<std::string, torch::Tensor>> p, OptimizerOptions o)
      : Optimizer(std::move(p), std::move(o)) {}

 protected:
  void apply_update(Slot& s, double lr, double c1, double c2) override {
    if (s.decay && options_.weight_decay != 0) s.param.mul_(1.0 - lr * options_.weight_decay);
    s.param.addcdiv_(s.exp_avg, (s.exp_avg_sq / c2).sqrt_().add_(options_.eps), -lr / c1);
  }
};

}  // namespace

std::unique_ptr<Optimizer> create_optimizer(const OptimizerOptions& options,
                                            std::vector<std::pair<std::string, torch::Tensor>> params) {
  if (options.name == "lamb") return std::make_unique<Lamb>(std::move(params), options);
  if (options.name == "adamw") return std::make_unique<AdamW>(std::move(params), options);
  throw ConfigError("optimizer.name is \"" + options.name + "\"; valid values: lamb, adamw");
}

double learning_rate(double base_lr, int64_t step, int64_t total_steps, double warmup_fraction, double power) {
  if (total_steps <= 0) throw joule::InternalError("learning rate schedule: total steps must be positive");
  const double progress = static_cast<double>(step) / static_cast<double>(total_steps);
  if (progress < warmup_fraction) return base_lr * progress / warmup_fraction;
  if (progress >= 1.0) return 0.0;
  return base_lr * std::pow((1.0 - progress) / (1.0 - warmup_fraction), power);
}

}  // namespace joule::trainer
