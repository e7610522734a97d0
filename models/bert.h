// BertForPreTraining in LibTorch, with parameter names and shapes exactly those of HuggingFace's
// BertForPreTraining state dict, so weights move between joule and HuggingFace unchanged: the shared encoder
// (models/bert_model.h) under "bert", the MLM and NSP heads under "cls".
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "data/batch.h"
#include "models/bert_config.h"
#include "models/bert_model.h"
#include "models/precision_ops.h"

namespace joule::models {

using PretrainingBatch = data::PretrainingBatch;

struct PretrainingOutput {
  torch::Tensor loss;           // mlm_loss + nsp_loss
  torch::Tensor mlm_loss;       // mean cross-entropy over the batch's masked predictions
  torch::Tensor nsp_loss;       // mean cross-entropy over the batch's sequences
  int64_t mlm_predictions = 0;  // number of masked predictions the MLM loss averaged over
  // Correct predictions, 0-dim int64 on the model's device (undefined without ForwardOptions::compute_accuracy): left
  // there, so a training step reads them with its other sums, not once per micro-batch.
  torch::Tensor mlm_correct, nsp_correct;
  torch::Tensor mlm_logits;  // [M, V] at the masked positions, row by row; only with ForwardOptions::keep_logits
  torch::Tensor nsp_logits;  // [B, 2]; only with ForwardOptions::keep_logits
};

enum class MlmHeadMode {
  kMaskedOnly,    // gather the masked positions, then transform + project to the vocabulary (default)
  kFullSequence,  // transform + project every position, then pick the masked ones (reference path)
};

struct ForwardOptions {
  MlmHeadMode mlm_head = MlmHeadMode::kMaskedOnly;
  bool compute_accuracy = true;  // argmax counts; costs one pass over the logits
  bool keep_logits = false;      // return the logits (fp32) in the output, e.g. to compare with another implementation
};

class BertForPreTrainingImpl : public torch::nn::Module {
 public:
  // Builds the modules and initializes them as HuggingFace does (normal(0, initializer_range) for
  // weights and embeddings, zero biases, LayerNorm 1/0, the [PAD] embedding row zero), from `seed`.
  explicit BertForPreTrainingImpl(const BertConfig& config, uint64_t seed = 0);

  // A batch on another device (the loader's, on the host) is first copied to the model's.
  PretrainingOutput forward(const PretrainingBatch& batch, const ForwardOptions& options = {});
  // Where the parameters live (BertForPreTraining->to(device) moves them).
  torch::Device device() const { return mlm_bias_.device(); }

  const BertConfig& config() const { return config_; }

  // The arithmetic of forward and backward (models/precision_ops.h). Parameters are created fp32 either way (a
  // ZeRO-1 reducer may hold the Linear weights in bf16: collectives/reducer.h).
  void set_precision(Precision precision, launch::Fp32Gemm fp32_gemm = launch::Fp32Gemm::kBlas) {
    ops_ = PrecisionOps(precision, fp32_gemm);
  }
  Precision precision() const { return ops_.precision(); }

  // Re-initializes every parameter from `seed` (deterministic, independent of torch's global RNG).
  void init_weights(uint64_t seed);

  // HuggingFace state-dict names and tensors, each stored tensor once: the MLM decoder weight is the
  // word-embedding matrix and is not listed again (as HuggingFace's safetensors files do).
  std::vector<std::pair<std::string, torch::Tensor>> hf_named_parameters() const;
  // The Linear layers' weights, by those names: used only as matmul operands (in bf16 under bf16 mixed precision, so
  // holding them in bf16 changes no arithmetic), each once per forward (its bf16 gradient is not summed in bf16). Not
  // the MLM decoder's, which is the word embeddings.
  std::vector<std::string> matmul_weight_names() const;

 private:
  torch::Tensor mlm_logits(const torch::Tensor& hidden);  // transform + tied decoder + bias

  BertConfig config_;
  PrecisionOps ops_;
  BertModel bert_{nullptr};
  torch::nn::Linear mlm_transform_{nullptr};
  torch::nn::LayerNorm mlm_norm_{nullptr};
  torch::Tensor mlm_bias_;
  torch::nn::Linear nsp_{nullptr};
};
TORCH_MODULE(BertForPreTraining);

// True when `name` (a HuggingFace parameter name) is exempt from weight decay in the BERT recipe:
// biases and LayerNorm parameters.
bool is_no_decay_parameter(const std::string& name);

// A batch of random tokens with the given shape, for tests and benchmarks (deterministic in seed).
PretrainingBatch synthetic_batch(const BertConfig& config, int64_t batch, int64_t seq_len, int64_t max_predictions,
                                 uint64_t seed);

}  // namespace joule::models
