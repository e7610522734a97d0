// HuggingFace save_pretrained layout: DIR/config.json + DIR/model.safetensors.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "models/bert.h"
#include "models/safetensors.h"

namespace joule::models {

// Writes config.json and model.safetensors (tensors converted to `dtype`: F32, F16 or BF16), each
// atomically. Creates DIR if needed.
void save_model_dir(const BertForPreTraining& model, const std::string& dir,
                    safetensors::DType dtype = safetensors::DType::F32);

// Writes named tensors to a safetensors file (converted to `dtype`, on the host), atomically.
void write_weights(const std::vector<std::pair<std::string, torch::Tensor>>& tensors, const std::string& path,
                   safetensors::DType dtype = safetensors::DType::F32);

// Copies a safetensors file's tensors into the model's parameters (converting F16/BF16/F64 to the
// parameter's dtype). Every parameter must be present with its exact shape; names the model does not
// have are an error, except those HuggingFace files may carry redundantly: the tied decoder
// (`cls.predictions.decoder.weight`/`.bias`, which must then equal the tensors they are tied to) and
// the `bert.embeddings.position_ids` buffer.
void load_weights(BertForPreTraining& model, const std::string& safetensors_path);

// Reads DIR/config.json, builds the model and loads DIR/model.safetensors.
BertForPreTraining load_model_dir(const std::string& dir);

// The vocabulary a model directory's weights were trained with, as its FNV-1a-64 checksum (hex): config.json's
// joule_vocab_fnv1a64, else the checksum of the directory's vocab.txt; "" when the directory records neither.
std::string model_vocab_checksum(const std::string& dir, const BertConfig& config);

// How a model's parameters meet a safetensors file's tensors (`model` names the model in messages).
struct WeightMatch {
  std::string model;
  std::function<std::string(const std::string& parameter)> file_name;  // the tensor a parameter reads
  std::function<bool(const std::string& tensor)> may_skip;             // a tensor the model may leave unread
  std::function<bool(const std::string& parameter)> may_keep;          // a parameter the file may lack
};
struct WeightLoad {
  std::vector<std::string> kept;     // parameters the file lacked (left as initialized)
  std::vector<std::string> skipped;  // tensors the model did not read
};
// Copies the file's tensors into `params` (converting F16/BF16/F64): every parameter's tensor present with its exact
// shape unless `may_keep`, and every tensor read unless `may_skip`; anything else a safetensors::FormatError naming
// the file and tensor.
WeightLoad load_matching(const std::vector<std::pair<std::string, torch::Tensor>>& params, const std::string& path,
                         const WeightMatch& match);

}  // namespace joule::models
