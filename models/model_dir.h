// HuggingFace save_pretrained layout: DIR/config.json + DIR/model.safetensors.
#pragma once

#include <string>

#include "models/bert.h"
#include "models/safetensors.h"

namespace joule::models {

// Writes config.json and model.safetensors (tensors converted to `dtype`: F32, F16 or BF16), each
// atomically. Creates DIR if needed.
void save_model_dir(const BertForPreTraining& model, const std::string& dir,
                    safetensors::DType dtype = safetensors::DType::F32);

// Copies a safetensors file's tensors into the model's parameters (converting F16/BF16/F64 to the
// parameter's dtype). Every parameter must be present with its exact shape; names the model does not
// have are an error, except those HuggingFace files may carry redundantly: the tied decoder
// (`cls.predictions.decoder.weight`/`.bias`, which must then equal the tensors they are tied to) and
// the `bert.embeddings.position_ids` buffer.
void load_weights(BertForPreTraining& model, const std::string& safetensors_path);

// Reads DIR/config.json, builds the model and loads DIR/model.safetensors.
BertForPreTraining load_model_dir(const std::string& dir);

}  // namespace joule::models
