// One optimizer step of data-parallel pretraining, the same code for `joule train` and `joule bench train`:
// `accumulation` micro-batches of forward and backward, the bucketed gradient all-reduce overlapped with the
// last backward, then the optimizer update (with optimizer.shard = zero1: the gradients reduce-scattered, each rank's
// shard updated, the parameters all-gathered). The step's objective is the mean loss over all its masked predictions
// plus the mean over all its sequences, every rank's together (not the mean of each micro-batch's means, which weighs
// a prediction by how many share its micro-batch): the same gradient for any micro-batch, accumulation and world
// size. A step whose gradient norm is NaN/Inf leaves parameters, moments and the schedule as they were
// (Optimizer::step) and reports itself skipped.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "collectives/reducer.h"
#include "launch/util/error.h"
#include "models/bert.h"
#include "trainer/optimizer.h"
#include "trainer/step_boundary.h"

namespace joule::trainer {

// train.max_nonfinite_steps consecutive steps had NaN/Inf gradients: the run stops on every rank.
class NonFiniteError : public joule::Error {
 public:
  explicit NonFiniteError(const std::string& message)
      : joule::Error(
            message,
            "lower optimizer.lr or lengthen optimizer.warmup_fraction, check the data, then --resume auto (or raise "
            "train.max_nonfinite_steps)") {}
};

// Sums over batches kept where the model computed them: the losses and correct counts stay on the device, in float64
// (the same figures as adding each batch's values on the host), and come to the host in one copy when a figure is
// needed (a logging interval's end, an eval's end); the counts the host knows without the device (predictions,
// sequences, batches) are kept on the host. A step adds its micro-batches without reading anything back.
class DeviceSums {
 public:
  void add(const models::PretrainingOutput& out, int64_t rows);  // one batch of `rows` sequences
  void add(const DeviceSums& other);
  BatchSums read() const;  // one device-to-host copy (none when nothing was added)

 private:
  torch::Tensor values_;  // float64: BatchSums' losses and correct counts (read()); undefined while empty
  BatchSums host_;        // mlm_predictions, sequences, batches
};

struct StepResult {
  double grad_norm = 0;                               // global gradient norm before clipping
  bool skipped = false;                               // the norm was NaN/Inf: no update was applied
  DeviceSums sums;                                    // this rank's micro-batches, not yet read
  int64_t sequences = 0;                              // the sequences this rank's micro-batches held
  double comm_seconds = 0, exposed_comm_seconds = 0;  // the reducer's figures for the synchronizing micro-batch
  double comm_bytes = 0;                              // the buckets communicated and the weights gathered
  // When skipped: this rank's micro-batches whose loss was NaN/Inf, by their rows (none known for batches that are
  // not a run's), and how many there were.
  std::vector<data::RowRun> nonfinite_rows;
  int64_t nonfinite_batches = 0;
};

// Hooks for whoever watches a step from outside (the benchmark's memory probe, fault injection).
struct StepOptions {
  bool poison_loss = false;              // multiply every micro-batch's loss by NaN (fault injection)
  std::function<void()> after_forward;   // after each micro-batch's forward pass
  std::function<void()> after_backward;  // after the reducer has finished (gradients averaged)
};

class TrainStep {
 public:
  using BatchSource = std::function<models::PretrainingBatch()>;
  // `comm`: the ranks the reducer reduces over (the step's counts are summed over them, within `timeout_seconds`).
  TrainStep(models::BertForPreTraining& model, collectives::GradientReducer& reducer, Optimizer& optimizer,
            collectives::Communicator& comm, double timeout_seconds, int64_t accumulation);

  // One step at learning rate `lr` on `accumulation` batches from `next_batch`. Rethrows a collective's error.
  StepResult run(const BatchSource& next_batch, double lr, const StepOptions& options = {});

 private:
  models::BertForPreTraining& model_;
  collectives::GradientReducer& reducer_;
  Optimizer& optimizer_;
  collectives::Communicator& comm_;
  double timeout_seconds_;
  int64_t accumulation_;
};

}  // namespace joule::trainer
