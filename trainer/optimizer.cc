#include "trainer/optimizer.h"

#include <cmath>
#include <map>
#include <stdexcept>

#include "models/bert.h"

namespace joule::trainer {

Optimizer::Optimizer(std::vector<std::pair<std::string, torch::Tensor>> params, OptimizerOptions options)
    : options_(std::move(options)) {
  if (options_.beta1 < 0 || options_.beta1 >= 1 || options_.beta2 < 0 || options_.beta2 >= 1 || options_.eps <= 0)
    throw std::invalid_argument("optimizer: betas must be in [0, 1) and eps positive");
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

double Optimizer::clip_gradients() {
  torch::NoGradGuard no_grad;
  double sum = 0;
  // Per-parameter norms, squared and summed in double: one read of each gradient (converting whole gradients
  // to float64 first cost ~7 % of a bert-base step in memory traffic).
  for (const Slot& s : slots_) {
    if (!s.param.grad().defined()) continue;
    const double n = s.param.grad().norm().item<double>();
    sum += n * n;
  }
  const double norm = std::sqrt(sum);
  if (std::isfinite(norm) && options_.max_grad_norm > 0 && norm > options_.max_grad_norm) {
    const double scale = options_.max_grad_norm / norm;
    for (Slot& s : slots_)
      if (s.param.grad().defined()) s.param.mutable_grad().mul_(scale);
  }
  return norm;
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
      if (it == by_name.end()) throw std::invalid_argument("optimizer state has no '" + std::string(prefix) + s.name + "'");
      if (it->second.sizes() != dst->sizes())
        throw std::invalid_argument("optimizer state '" + std::string(prefix) + s.name + "' has another shape than the parameter");
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

double Optimizer::step(double lr) {
  const double norm = clip_gradients();
  if (std::isfinite(norm)) update(lr);
  return norm;
}

void Optimizer::update(double lr) {
  torch::NoGradGuard no_grad;
  ++steps_;
  const double b1 = options_.beta1, b2 = options_.beta2;
  const double c1 = 1.0 - std::pow(b1, static_cast<double>(steps_)), c2 = 1.0 - std::pow(b2, static_cast<double>(steps_));
  for (Slot& s : slots_) {
    if (!s.param.grad().defined()) continue;
    const torch::Tensor& g = s.param.grad();
    s.exp_avg.mul_(b1).add_(g, 1.0 - b1);
    s.exp_avg_sq.mul_(b2).addcmul_(g, g, 1.0 - b2);
    apply_update(s, lr, c1, c2);
  }
}

namespace {

class Lamb : public Optimizer {
 public:
  Lamb(std::vector<std::pair<std::string, torch::Tensor>> p, OptimizerOptions o) : Optimizer(std::move(p), std::move(o)) {}

 protected:
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
  AdamW(std::vector<std::pair<std::string, torch::Tensor>> p, OptimizerOptions o) : Optimizer(std::move(p), std::move(o)) {}

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
  throw std::invalid_argument("optimizer.name is \"" + options.name + "\"; valid values: lamb, adamw");
}

double learning_rate(double base_lr, int64_t step, int64_t total_steps, double warmup_fraction, double power) {
  if (total_steps <= 0) throw std::invalid_argument("learning rate schedule: total steps must be positive");
  const double progress = static_cast<double>(step) / static_cast<double>(total_steps);
  if (progress < warmup_fraction) return base_lr * progress / warmup_fraction;
  if (progress >= 1.0) return 0.0;
  return base_lr * std::pow((1.0 - progress) / (1.0 - warmup_fraction), power);
}

}  // namespace joule::trainer
