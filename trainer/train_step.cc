#include "trainer/train_step.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "launch/cpu_allocator.h"
#include "models/bf16_linear.h"

namespace joule::trainer {

void DeviceSums::add(const models::PretrainingOutput& out, int64_t rows) {
  const auto zero = [&] { return torch::zeros({}, out.mlm_loss.options().dtype(torch::kInt64)); };
  const torch::Tensor mlm_loss = out.mlm_loss.detach().to(torch::kFloat64);
  const torch::Tensor nsp_loss = out.nsp_loss.detach().to(torch::kFloat64);
  const torch::Tensor batch =
      torch::stack({mlm_loss, nsp_loss, (out.mlm_correct.defined() ? out.mlm_correct : zero()).to(torch::kFloat64),
                    (out.nsp_correct.defined() ? out.nsp_correct : zero()).to(torch::kFloat64),
                    mlm_loss * static_cast<double>(out.mlm_predictions), nsp_loss * static_cast<double>(rows)});
  values_ = values_.defined() ? values_ + batch : batch;
  host_.mlm_predictions += static_cast<double>(out.mlm_predictions);
  host_.sequences += static_cast<double>(rows);
  host_.batches += 1;
}

void DeviceSums::add(const DeviceSums& other) {
  if (!other.values_.defined()) return;
  values_ = values_.defined() ? values_ + other.values_ : other.values_;
  host_.add(other.host_);
}

BatchSums DeviceSums::read() const {
  BatchSums s = host_;
  if (!values_.defined()) return s;
  const torch::Tensor host = values_.to(torch::kCPU);
  const double* v = host.data_ptr<double>();
  s.mlm_loss = v[0];
  s.nsp_loss = v[1];
  s.mlm_correct = v[2];
  s.nsp_correct = v[3];
  s.mlm_loss_total = v[4];
  s.nsp_loss_total = v[5];
  return s;
}

namespace {

// The masked predictions of a batch: each row's slots up to its first 0 (counted on the host, where batches are read).
double predictions_of(const models::PretrainingBatch& b) {
  const torch::Tensor positions = b.masked_positions.to(torch::kCPU);
  return static_cast<double>((positions != 0).to(torch::kInt64).cumprod(1).sum().item<int64_t>());
}

}  // namespace

TrainStep::TrainStep(models::BertForPreTraining& model, collectives::GradientReducer& reducer, Optimizer& optimizer,
                     collectives::Communicator& comm, double timeout_seconds, int64_t accumulation)
    : model_(model),
      reducer_(reducer),
      optimizer_(optimizer),
      comm_(comm),
      timeout_seconds_(timeout_seconds),
      accumulation_(accumulation) {}

StepResult TrainStep::run(const BatchSource& next_batch, double lr, const StepOptions& options) {
  StepResult r;
  reducer_.hold_bf16_weights();  // ZeRO-1 with bf16 weights: a no-op after the first step (and a checkpoint's fp32)
  reducer_.zero_grad();
  std::vector<torch::Tensor> gradients;
  for (const torch::Tensor& p : model_->parameters()) gradients.push_back(p.grad());
  std::optional<models::ZeroGradientScope> zeroed(std::in_place, gradients);  // until the last backward
  // The step's batches, and its predictions and sequences over every rank: each micro-batch's mean losses are
  // weighted by its share of them, so the step's gradient is that of the mean over all its predictions (and
  // sequences), whatever the micro-batch, accumulation and world size.
  std::vector<models::PretrainingBatch> batches;
  std::vector<double> predictions;
  double counts[2] = {0, 0};  // predictions, sequences
  for (int64_t m = 0; m < accumulation_; ++m) {
    batches.push_back(next_batch());
    predictions.push_back(predictions_of(batches.back()));
    counts[0] += predictions.back();
    counts[1] += static_cast<double>(batches.back().sequence_count());
  }
  comm_
      .all_reduce({counts, 2, collectives::DType::kFloat64},
                  {collectives::ReduceOp::kSum, timeout_seconds_, "the step's prediction and sequence counts"})
      ->wait();
  const double world = comm_.info().world_size;                             // the reducer averages the ranks' gradients
  std::vector<std::pair<torch::Tensor, std::vector<data::RowRun>>> losses;  // read only when the step is skipped
  for (int64_t m = 0; m < accumulation_; ++m) {
    const models::PretrainingBatch& batch = batches[static_cast<size_t>(m)];
    reducer_.begin_micro_batch(m == accumulation_ - 1);  // only the last micro-batch communicates
    models::PretrainingOutput out = model_->forward(batch);
    if (options.after_forward) options.after_forward();
    const double mlm_share = predictions[static_cast<size_t>(m)] * world / std::max(1.0, counts[0]);
    const double nsp_share = static_cast<double>(batch.sequence_count()) * world / std::max(1.0, counts[1]);
    torch::Tensor objective = out.mlm_loss * mlm_share + out.nsp_loss * nsp_share;
    if (options.poison_loss) objective = objective * std::numeric_limits<double>::quiet_NaN();
    losses.emplace_back(objective.detach(), batch.rows ? batch.rows->sources : std::vector<data::RowRun>{});
    objective.backward();
    r.sums.add(out, batch.sequence_count());
    r.sequences += batch.sequence_count();
  }
  zeroed.reset();
  batches.clear();
  reducer_.finish();
  if (options.after_backward) options.after_backward();
  r.grad_norm = optimizer_.step(lr);  // leaves everything as it was when the norm is NaN/Inf
  // The reduced gradients, hence their norm, are the same on every rank: all ranks skip together.
  r.skipped = !std::isfinite(r.grad_norm);
  if (r.skipped)  // which of this rank's rows gave a NaN/Inf loss (one read of each micro-batch's loss)
    for (const auto& [loss, rows] : losses) {
      if (std::isfinite(loss.item<double>())) continue;
      ++r.nonfinite_batches;
      r.nonfinite_rows.insert(r.nonfinite_rows.end(), rows.begin(), rows.end());
    }
  if (!r.skipped) reducer_.gather_parameters();  // ZeRO-1: every rank's updated shard to every rank
  launch::release_unused_cpu_blocks();           // sizes this step did not reuse (see launch/cpu_allocator.h)
  const collectives::ReducerStats& stats = reducer_.stats();
  r.comm_seconds = stats.comm_seconds + stats.gather_seconds;
  r.exposed_comm_seconds = stats.exposed_seconds + stats.gather_seconds;  // the gather is not overlapped
  r.comm_bytes = static_cast<double>(stats.bytes + stats.gather_bytes);
  return r;
}

}  // namespace joule::trainer
