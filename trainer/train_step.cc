#include "trainer/train_step.h"

#include <cmath>
#include <limits>

#include "launch/cpu_allocator.h"

namespace joule::trainer {

namespace {

// The counts of one batch; its losses are added by the caller (read from the device once per step, or per batch).
void add_counts(BatchSums& sums, const models::PretrainingOutput& out, int64_t rows) {
  sums.mlm_correct += static_cast<double>(out.mlm_correct);
  sums.mlm_predictions += static_cast<double>(out.mlm_predictions);
  sums.nsp_correct += static_cast<double>(out.nsp_correct);
  sums.sequences += static_cast<double>(rows);
  sums.batches += 1;
}

}  // namespace

void add_output(BatchSums& sums, const models::PretrainingOutput& out, int64_t rows) {
  sums.mlm_loss += out.mlm_loss.item<double>();
  sums.nsp_loss += out.nsp_loss.item<double>();
  add_counts(sums, out, rows);
}

TrainStep::TrainStep(models::BertForPreTraining& model, collectives::GradientReducer& reducer, Optimizer& optimizer,
                     int64_t accumulation)
    : model_(model), reducer_(reducer), optimizer_(optimizer), accumulation_(accumulation) {}

StepResult TrainStep::run(const BatchSource& next_batch, double lr, const StepOptions& options) {
  StepResult r;
  reducer_.zero_grad();
  torch::Tensor losses;  // [mlm, nsp] summed over the micro-batches, detached: read once at the end of the step
  for (int64_t m = 0; m < accumulation_; ++m) {
    const models::PretrainingBatch batch = next_batch();
    reducer_.begin_micro_batch(m == accumulation_ - 1);  // only the last micro-batch communicates
    models::PretrainingOutput out = model_->forward(batch);
    if (options.after_forward) options.after_forward();
    if (options.poison_loss) out.loss = out.loss * std::numeric_limits<double>::quiet_NaN();
    (accumulation_ > 1 ? out.loss / static_cast<double>(accumulation_) : out.loss).backward();
    // In float64, as the sums are kept: the same figures as adding each batch's losses on the host.
    const torch::Tensor pair = torch::stack({out.mlm_loss.detach(), out.nsp_loss.detach()}).to(torch::kFloat64);
    losses = losses.defined() ? losses + pair : pair;
    add_counts(r.sums, out, batch.input_ids.size(0));
  }
  reducer_.finish();
  const torch::Tensor host = losses.to(torch::kCPU);
  r.sums.mlm_loss = host[0].item<double>();
  r.sums.nsp_loss = host[1].item<double>();
  if (options.after_backward) options.after_backward();
  r.grad_norm = optimizer_.step(lr);     // leaves everything as it was when the norm is NaN/Inf
  launch::release_unused_cpu_blocks();  // sizes this step did not reuse (see launch/cpu_allocator.h)
  // The reduced gradients, hence their norm, are the same on every rank: all ranks skip together.
  r.skipped = !std::isfinite(r.grad_norm);
  r.comm_seconds = reducer_.stats().comm_seconds;
  r.exposed_comm_seconds = reducer_.stats().exposed_seconds;
  return r;
}

}  // namespace joule::trainer
