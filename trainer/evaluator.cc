#include "trainer/evaluator.h"

#include <algorithm>
#include <climits>
#include <filesystem>
#include <vector>

#include "data/loader.h"
#include "data/row_reader.h"
#include "launch/util/error.h"
#include "models/model_dir.h"
#include "models/safetensors.h"

namespace joule::trainer {

namespace fs = std::filesystem;

BatchSums evaluate_slice(models::BertForPreTraining& model, const data::Dataset& dataset, int64_t batch,
                         int64_t max_batches, int rank, int world) {
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  DeviceSums sums;
  const int64_t total =
      std::min<int64_t>(max_batches > 0 ? max_batches : INT64_MAX, (dataset.size() + batch - 1) / batch);
  for (int64_t b = rank; b < total; b += world) {
    std::vector<uint64_t> ids;
    for (int64_t i = b * batch; i < std::min<int64_t>(dataset.size(), (b + 1) * batch); ++i)
      ids.push_back(static_cast<uint64_t>(i));
    const models::PretrainingBatch rows = data::Loader::to_tensors(data::read_sequences(dataset, ids));
    sums.add(model->forward(rows), rows.sequence_count());
  }
  if (was_training) model->train();
  return sums.read();
}

namespace {

void dump_first_batch(models::BertForPreTraining& model, const data::Dataset& dataset, int64_t batch,
                      const std::string& path) {
  torch::NoGradGuard no_grad;
  model->eval();
  std::vector<uint64_t> ids;
  for (int64_t i = 0; i < std::min<int64_t>(dataset.size(), batch); ++i) ids.push_back(static_cast<uint64_t>(i));
  const models::PretrainingBatch b = data::Loader::to_tensors(data::read_sequences(dataset, ids));
  models::ForwardOptions options;
  options.keep_logits = true;
  const models::PretrainingOutput out = model->forward(b, options);
  namespace st = models::safetensors;
  std::vector<torch::Tensor> keep;
  std::vector<st::TensorToWrite> tensors;
  auto add = [&](const std::string& name, const torch::Tensor& t) {
    const bool integer = t.scalar_type() == torch::kInt64;
    keep.push_back(t.detach().to(torch::kCPU, integer ? torch::kInt64 : torch::kFloat).contiguous());
    tensors.push_back(
        {name, integer ? st::DType::I64 : st::DType::F32, keep.back().sizes().vec(), keep.back().data_ptr()});
  };
  add("input_ids", b.input_ids);
  add("token_type_ids", b.token_type_ids);
  add("attention_mask", b.attention_mask);
  add("masked_positions", b.masked_positions);
  add("masked_ids", b.masked_ids);
  add("next_sentence_labels", b.next_sentence_labels);
  add("mlm_logits", out.mlm_logits);
  add("nsp_logits", out.nsp_logits);
  add("mlm_loss", out.mlm_loss.reshape({1}));
  add("nsp_loss", out.nsp_loss.reshape({1}));
  st::write(path, tensors);
}

}  // namespace

namespace {

// --model must be an HF model directory (config.json + model.safetensors). What else users give it (a checkpoint, a
// run directory, a preset name, a config.json) is named as such, with the command that makes a model directory.
void check_model_dir(const std::string& dir) {
  const fs::path d(dir);
  std::error_code ec;
  const auto refuse = [&](const std::string& what, const std::string& hint) {
    throw joule::UsageError("--model " + dir + ": " + what, hint);
  };
  const std::string make =
      "a run's final/ is one; `joule export --checkpoint CKPT --out DIR` makes one of a checkpoint";
  if (!fs::exists(d, ec)) {
    if (dir.find('/') == std::string::npos && d.extension().empty())
      refuse("no such directory (a preset name such as bert-large has no trained weights)",
             "give a model directory (" + make + "), or `joule model init --config " + dir +
                 " --out DIR` for random weights");
    refuse("no such model directory", "give an HF model directory (config.json and model.safetensors): " + make);
  }
  if (!fs::is_directory(d, ec))
    refuse("not a directory" + std::string(d.extension() == ".json" ? " (a config.json alone has no weights)" : ""),
           "give the directory that holds config.json and model.safetensors: " + make);
  if (fs::exists(d / "manifest.json", ec) || fs::exists(d / "trainer_state.json", ec))
    refuse("a joule checkpoint, not a model directory",
           "`joule export --checkpoint " + dir + " --out DIR` makes a model directory of it");
  if (fs::exists(d / "config.toml", ec) && !fs::exists(d / "config.json", ec))
    refuse("a run directory, not a model directory",
           fs::is_directory(d / "final", ec)
               ? "its trained model is " + (d / "final").string()
               : "`joule export --checkpoint " + dir + " --out DIR` makes a model directory of its newest checkpoint");
  for (const char* file : {"config.json", "model.safetensors"})
    if (!fs::exists(d / file, ec))
      refuse(std::string("no ") + file + " in it",
             "an HF model directory holds config.json and model.safetensors: " + make);
}

}  // namespace

EvalResult evaluate_model_dir(const std::string& model_dir, const std::string& data_spec, int64_t batch,
                              int64_t max_batches, models::Precision precision, const std::string& dump,
                              launch::Fp32Gemm fp32_gemm) {
  check_model_dir(model_dir);
  models::BertForPreTraining model = models::load_model_dir(model_dir);
  model->set_precision(precision, fp32_gemm);
  const data::Dataset dataset =
      data::Dataset::open(data::data_create_split(data_spec, "eval"), {model->config().vocab_size, true});
  // A model and its data share a vocabulary: the one the weights were trained with and the shards' (both recorded).
  if (const std::string model_vocab = models::model_vocab_checksum(model_dir, model->config());
      !model_vocab.empty() && dataset.created_by() && !dataset.created_by()->vocab_fnv1a64.empty() &&
      model_vocab != dataset.created_by()->vocab_fnv1a64)
    throw data::ShardError(dataset.spec() + ": the shards were made with another vocabulary (" +
                               dataset.created_by()->metadata_path + " records vocab_fnv1a64 " +
                               dataset.created_by()->vocab_fnv1a64 + ") than the model in " + model_dir +
                               " was trained with (" + model_vocab + "): every token id would mean another word",
                           "evaluate on shards made with the model's vocabulary (joule data create --vocab)");
  if (dataset.seq_len() > model->config().max_position_embeddings)
    throw data::ShardError(dataset.spec() + ": the shards' sequence length " + std::to_string(dataset.seq_len()) +
                               " exceeds the max_position_embeddings " +
                               std::to_string(model->config().max_position_embeddings) + " of the model in " +
                               model_dir,
                           "evaluate with shards made with a --seq-len the model takes (joule data create --seq-len)");
  if (!dump.empty()) dump_first_batch(model, dataset, batch, dump);
  return finish_eval(evaluate_slice(model, dataset, batch, max_batches, 0, 1));
}

}  // namespace joule::trainer
