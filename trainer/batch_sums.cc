#include "trainer/batch_sums.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace joule::trainer {

void BatchSums::add(const BatchSums& other) {
  mlm_loss += other.mlm_loss;
  nsp_loss += other.nsp_loss;
  mlm_correct += other.mlm_correct;
  mlm_predictions += other.mlm_predictions;
  nsp_correct += other.nsp_correct;
  sequences += other.sequences;
  batches += other.batches;
  mlm_loss_total += other.mlm_loss_total;
  nsp_loss_total += other.nsp_loss_total;
}

EvalResult finish_eval(const BatchSums& c) {
  EvalResult r;
  r.mlm_loss = c.mlm_loss_total / std::max(1.0, c.mlm_predictions);
  r.nsp_loss = c.nsp_loss_total / std::max(1.0, c.sequences);
  r.loss = r.mlm_loss + r.nsp_loss;
  r.mlm_accuracy = c.mlm_correct / std::max(1.0, c.mlm_predictions);
  r.nsp_accuracy = c.nsp_correct / std::max(1.0, c.sequences);
  r.sequences = static_cast<int64_t>(c.sequences);
  return r;
}

}  // namespace joule::trainer
