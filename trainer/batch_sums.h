// Sums over batches of what the masked-LM and next-sentence heads measured, and the evaluation figures made from
// them; training intervals and eval alike. No LibTorch.
#pragma once

#include <cstdint>
#include <string>

#include "trainer/cost/run_summary.h"

namespace joule::trainer {

struct BatchSums {
  double mlm_loss = 0, nsp_loss = 0, mlm_correct = 0, mlm_predictions = 0, nsp_correct = 0, sequences = 0, batches = 0;
  void add(const BatchSums& other);
};

// An evaluation's figures: the struct the run summary carries (trainer/cost/run_summary.h).
using EvalResult = EvalFigures;

// The figures from sums over every rank's slice: mean losses per batch, accuracies per prediction/sequence.
EvalResult finish_eval(const BatchSums& sums);

}  // namespace joule::trainer
