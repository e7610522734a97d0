// Masked-LM and next-sentence evaluation with dropout off: inside a training run (every rank takes its share of
// the eval batches; the sums are reduced at the step boundary) and for `joule eval` (one process).
#pragma once

#include <cstdint>
#include <string>

#include "data/dataset.h"
#include "launch/blas_core.h"
#include "models/bert.h"
#include "trainer/batch_sums.h"
#include "trainer/train_step.h"

namespace joule::trainer {

// Batches of `dataset` in order, `batch` sequences each, at most `max_batches` (0: all); rank r of `world`
// takes batches r, r + world, ... Dropout is off while it runs; the model's mode is restored after.
BatchSums evaluate_slice(models::BertForPreTraining& model, const data::Dataset& dataset, int64_t batch,
                         int64_t max_batches, int rank, int world);

// `joule eval`: dropout off, one process, in `precision`. `max_batches` 0: the whole dataset. `dump` (when not
// empty): a safetensors file with the first batch (its six tensors under their batch names, int64), joule's logits
// on it (mlm_logits [M, V] at the masked positions row by row, nsp_logits [B, 2]) and its two losses, for comparing
// with another implementation (tools/device/hf_roundtrip.py).
EvalResult evaluate_model_dir(const std::string& model_dir, const std::string& data, int64_t batch, int64_t max_batches,
                              models::Precision precision = models::Precision::kFp32, const std::string& dump = "",
                              launch::Fp32Gemm fp32_gemm = launch::Fp32Gemm::kBlas);

}  // namespace joule::trainer
