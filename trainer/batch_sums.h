// Sums over batches of what the masked-LM and next-sentence heads measured, and the evaluation figures made from
// them; training intervals and eval alike. No LibTorch.
#pragma once

#include <cstdint>
#include <string>

#include "trainer/cost/run_summary.h"

namespace joule::trainer {

struct BatchSums {
  // mlm_loss, nsp_loss: each batch's mean loss, summed over batches. mlm_loss_total, nsp_loss_total: every masked
  // prediction's and every sequence's loss, summed (each batch's mean times its predictions or sequences): training
  // and evaluation figures divide these by the counts, so they do not depend on how the data was cut into batches
  // (the training step's objective is the same mean: trainer/train_step.h).
  double mlm_loss = 0, nsp_loss = 0, mlm_correct = 0, mlm_predictions = 0, nsp_correct = 0, sequences = 0, batches = 0;
  double mlm_loss_total = 0, nsp_loss_total = 0;
  void add(const BatchSums& other);
  double mlm_training_loss() const { return mlm_loss_total / (mlm_predictions > 0 ? mlm_predictions : 1.0); }
  double nsp_training_loss() const { return nsp_loss_total / (sequences > 0 ? sequences : 1.0); }
  double training_loss() const { return mlm_training_loss() + nsp_training_loss(); }
};

// An evaluation's figures: the struct the run summary carries (trainer/cost/run_summary.h).
using EvalResult = cost::EvalFigures;

// The figures from sums over every rank's slice: the mean loss over every masked prediction (MLM) and every sequence
// (NSP), accuracies per prediction and per sequence; the same at any batch size.
EvalResult finish_eval(const BatchSums& sums);

}  // namespace joule::trainer
