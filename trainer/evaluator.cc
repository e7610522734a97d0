#include "trainer/evaluator.h"

#include <algorithm>
#include <climits>
#include <vector>

#include "data/loader.h"
#include "models/model_dir.h"

namespace joule::trainer {

BatchSums evaluate_slice(models::BertForPreTraining& model, const data::Dataset& dataset, int64_t batch, int64_t max_batches,
                         int rank, int world) {
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  BatchSums sums;
  const int64_t total = std::min<int64_t>(max_batches > 0 ? max_batches : INT64_MAX, (dataset.size() + batch - 1) / batch);
  for (int64_t b = rank; b < total; b += world) {
    std::vector<uint64_t> ids;
    for (int64_t i = b * batch; i < std::min<int64_t>(dataset.size(), (b + 1) * batch); ++i) ids.push_back(static_cast<uint64_t>(i));
    auto host = data::Loader::read_sequences(dataset, ids);
    add_output(sums, model->forward(data::Loader::to_tensors(host)), static_cast<int64_t>(ids.size()));
  }
  if (was_training) model->train();
  return sums;
}

EvalResult evaluate_model_dir(const std::string& model_dir, const std::string& data_spec, int64_t batch, int64_t max_batches,
                              models::Precision precision) {
  models::BertForPreTraining model = models::load_model_dir(model_dir);
  model->set_precision(precision);
  const data::Dataset dataset = data::Dataset::open(data_spec, {model->config().vocab_size, true});
  return finish_eval(evaluate_slice(model, dataset, batch, max_batches, 0, 1));
}

}  // namespace joule::trainer
