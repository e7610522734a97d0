// `joule model init|info` and `joule version`, as functions main() only calls.
#pragma once

#include <cstdint>
#include <string>

#include "models/bert_config.h"

namespace joule::tools {

// The folder holding configs/ (presets): $JOULE_CONFIG_DIR, else the source tree's configs/.
std::string config_dir();

// Resolves --config (a preset name, a config.json, or a model directory) against configs/models.
models::BertConfig resolve_model_config(const std::string& arg);

// Parameter counts per group and in total: from the config in closed form, cross-checked against an
// instantiated model; for a model directory also what its model.safetensors holds.
std::string model_info(const std::string& config_or_dir);

// Writes a freshly initialized HF model directory; returns a one-line description.
std::string model_init(const std::string& config_arg, uint64_t seed, const std::string& out_dir,
                       const std::string& dtype);

// joule's version and the LibTorch, MPI, HDF5 and BLAS in use. `blas_warning` receives a loud
// warning when LibTorch runs on the reference BLAS (empty otherwise).
std::string version_report(std::string* blas_warning, bool with_gemm_path = true);

}  // namespace joule::tools
