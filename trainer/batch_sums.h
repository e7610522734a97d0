// Sums over batches of what the masked-LM and next-sentence heads measured, and the evaluation figures made from
// them; training intervals and eval alike. No LibTorch.
#pragma once

#include <cstdint>
#include <string>

#include "trainer/cost/run_summary.h"

namespace joule::trainer {

struct BatchSums {
  // mlm_loss, nsp_loss: each batch's mean loss, summed over batches (a training interval's figure is their mean, the
  // loss the optimizer saw). mlm_loss_total, nsp_loss_total: every masked prediction's and every sequence's loss,
  // summed (each batch's mean times its predictions or sequences): an evaluation's figures divide these by the counts,
  // so they do not depend on how the data was cut into batches.
  double mlm_loss = 0, nsp_loss = 0, mlm_correct = 0, mlm_predictions = 0, nsp_correct = 0, sequences = 0, batches = 0;
  double mlm_loss_total = 0, nsp_loss_total = 0;
  void add(const BatchSums& other);
};

// An evaluation's figures: the struct the run summary carries (trainer/cost/run_summary.h).
using EvalResult = cost::EvalFigures;

// The figures from sums over every rank's slice: the mean loss over every masked prediction (MLM) and every sequence
// (NSP), accuracies per prediction and per sequence; the same at any batch size.
EvalResult finish_eval(const BatchSums& sums);

}  // namespace joule::trainer
