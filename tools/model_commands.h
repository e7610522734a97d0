// `joule model init|info` and `joule version`, as functions main() only calls.
#pragma once

#include <cstdint>
#include <string>

#include "models/bert_config.h"
#include "models/precision.h"
#include "tools/config_dir.h"  // config_dir(), which the commands resolving presets pass on

namespace joule::tools {

// Resolves --config (a preset name, a config.json, or a model directory) against configs/models.
models::BertConfig resolve_model_config(const std::string& arg);

// Parameter counts per group and in total: from the config in closed form, cross-checked against an
// instantiated model; for a model directory also what its model.safetensors holds.
std::string model_info(const std::string& config_or_dir);

// Writes a freshly initialized HF model directory (BertForPreTraining, or `architecture`: an inference class of
// models/encoder_model.h with `labels` outputs, 0: the config's id2label, else 2); returns a one-line description.
std::string model_init(const std::string& config_arg, uint64_t seed, const std::string& out_dir,
                       const std::string& dtype, const std::string& architecture = "", int64_t labels = 0);

// A model directory's outputs for the inputs in a safetensors file (input_ids and attention_mask [B, L]; optional
// token_type_ids, and bbox [B, L, 4] for LayoutLM; I64 or I32), written to `out` as F32 safetensors: "logits" for a
// classification model, "hidden" and "pooled" (where it has a pooler) always. `architecture` empty: config.json's.
// `labels` 0: config.json's. Returns the lines to print (notes first).
std::string model_forward(const std::string& dir, const std::string& architecture, int64_t labels,
                          const std::string& inputs, const std::string& out, models::PrecisionSetting precision);

// joule's version and the LibTorch, MPI, HDF5 and BLAS in use. `blas_warning` receives a loud
// warning when LibTorch runs on the reference BLAS (empty otherwise).
std::string version_report(std::string* blas_warning, bool with_gemm_path = true);

}  // namespace joule::tools
