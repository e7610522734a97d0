// Watches the training loss for spikes: a step whose loss is more than `factor` times the running mean of the steps
// before it. The running mean is an exponential one over about 50 steps, and it watches only after 20 steps (the
// first steps' loss falls fast). A resumed segment starts its mean again. No LibTorch.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>

namespace joule::trainer {

class LossSpikeWatch {
 public:
  static constexpr int64_t kWarmupSteps = 20;
  static constexpr double kWeight = 2.0 / 51.0;  // the new step's weight: a 50-step exponential mean

  explicit LossSpikeWatch(double factor) : factor_(factor) {}  // factor 0: off

  // The running mean the step's loss spiked above, or nothing. NaN/Inf losses (skipped steps) are left out.
  std::optional<double> observe(double loss) {
    if (factor_ <= 0 || !std::isfinite(loss)) return std::nullopt;
    const double before = mean_;
    const bool watching = steps_ >= kWarmupSteps;
    mean_ = steps_ == 0 ? loss : mean_ + kWeight * (loss - mean_);
    ++steps_;
    if (watching && loss > factor_ * before) return before;
    return std::nullopt;
  }

 private:
  double factor_;
  double mean_ = 0;
  int64_t steps_ = 0;
};

}  // namespace joule::trainer
