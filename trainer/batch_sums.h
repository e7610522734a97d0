// Sums over batches of what the masked-LM and next-sentence heads measured, and the evaluation figures made from
// them; training intervals and eval alike. No LibTorch.
#pragma once

#include <cstdint>
#include <string>

namespace joule::trainer {

struct BatchSums {
  double mlm_loss = 0, nsp_loss = 0, mlm_correct = 0, mlm_predictions = 0, nsp_correct = 0, sequences = 0, batches = 0;
  void add(const BatchSums& other);
};

struct EvalResult {
  double mlm_loss = 0, nsp_loss = 0, loss = 0, mlm_accuracy = 0, nsp_accuracy = 0;
  int64_t sequences = 0;
  std::string to_json() const;
};

// The figures from sums over every rank's slice: mean losses per batch, accuracies per prediction/sequence.
EvalResult finish_eval(const BatchSums& sums);

}  // namespace joule::trainer
