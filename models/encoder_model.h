// The HuggingFace classes joule runs for inference, built on the encoder BertForPreTraining trains
// (models/bert_model.h): BertModel and LayoutLMModel (the encoder alone), and their ...ForSequenceClassification
// (a Linear classifier on the pooled [CLS] state) and ...ForTokenClassification (one on every token's state), with
// HuggingFace's parameter names, so a directory `save_pretrained` wrote loads unchanged.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "launch/blas_core.h"
#include "models/bert_config.h"
#include "models/bert_model.h"
#include "models/precision.h"
#include "models/precision_ops.h"

namespace joule::models {

enum class Head { kNone, kSequence, kToken };

struct Architecture {
  std::string name;        // HuggingFace's class name
  std::string model_type;  // "bert" or "layoutlm"
  Head head = Head::kNone;
  bool pooler = true;  // BertForTokenClassification has none
  std::string prefix;  // where the encoder's names sit: "" (the encoder alone), "bert" or "layoutlm"
};

// The classes joule runs, in a stable order.
const std::vector<Architecture>& inference_architectures();
// By class name; a joule::UsageError naming the ones joule runs otherwise.
const Architecture& architecture_named(const std::string& hf_class);

// What a forward computes: every output, or only what the logits need. A sequence head reads the pooled [CLS] state
// alone, so with kLogits its model's last layer computes that position only after the key and value projections (the
// same logits up to rounding; bert-base: 7 % fewer FLOPs) and `hidden` is [B, 1, H]; other models compute everything
// either way.
enum class Outputs { kAll, kLogits };

struct EncoderOutput {
  torch::Tensor hidden;  // [B, L, H] fp32 ([B, 1, H]: see Outputs)
  torch::Tensor pooled;  // [B, H] fp32, where the model has a pooler
  torch::Tensor logits;  // fp32: [B, labels] (sequence head), [B, L, labels] (token head); undefined without a head
};

class EncoderModel {
 public:
  // A model of `architecture` for `config` (config.model_type must be the architecture's), with `labels` outputs per
  // sequence or token where it has a head; initialized from `seed` as HuggingFace does.
  EncoderModel(const BertConfig& config, const Architecture& architecture, int64_t labels, uint64_t seed = 0);

  // In inference mode (no dropout, no autograd).
  EncoderOutput forward(const EncoderInput& input, Outputs outputs = Outputs::kAll);
  // Whether forward(..., outputs) computes the last layer at the first position only (see Outputs).
  bool first_position_only(Outputs outputs) const {
    return outputs == Outputs::kLogits && architecture_.head == Head::kSequence;
  }
  // The compute precision. In bf16 the matmul weights and their biases are held in bf16 from then on, cast once
  // rather than at every forward (embeddings and LayerNorm stay fp32, as the forward reads them); going back to fp32
  // after that is refused (the cast lost the low bits: load the model again). In bf16 the matmul weights are also
  // packed once in oneDNN's blocked layout (models/bf16_linear.h PackedWeights: as much memory again as they take).
  void set_precision(Precision precision, launch::Fp32Gemm fp32_gemm = launch::Fp32Gemm::kBlas);
  const BertConfig& config() const { return config_; }
  const Architecture& architecture() const { return architecture_; }
  int64_t labels() const { return labels_; }
  // The weights packed for oneDNN's bf16 GEMMs, or nullptr (fp32, or a joule without oneDNN).
  const PackedWeights* packed_weights() const { return ops_.packed_weights(); }
  // HuggingFace state-dict names: the encoder's under architecture().prefix, then "classifier.weight"/".bias".
  std::vector<std::pair<std::string, torch::Tensor>> hf_named_parameters() const;

 private:
  BertConfig config_;
  Architecture architecture_;
  int64_t labels_;
  PrecisionOps ops_;
  BertModel encoder_{nullptr};
  torch::nn::Linear classifier_{nullptr};
};

struct LoadedEncoderModel {
  EncoderModel model;
  std::vector<std::string> loading_notes;  // what the directory lacked or held beyond the model, said to the user
  std::string initialized;                 // the parameters the directory lacked, initialized ("" when none)
};

// DIR/config.json and DIR/model.safetensors as `architecture` (empty: config.json's first "architectures" entry;
// a BertForPreTraining directory, such as a joule run's final/, needs one named). The encoder's names may carry
// another prefix than the model's (a base model's directory loads into a head and the reverse); a head the directory
// lacks is initialized (a note says so), a pretraining directory's MLM/NSP heads are left unread (a note), and
// anything else missing or unknown is an error naming the tensor. `labels` 0: config.json's id2label, else 2.
LoadedEncoderModel load_encoder_model(const std::string& dir, const std::string& architecture = "", int64_t labels = 0);

// Writes DIR/config.json (its "architectures" the model's, id2label with `labels` names or LABEL_k) and
// DIR/model.safetensors (F32), each atomically.
void save_encoder_model(const EncoderModel& model, const std::string& dir);

}  // namespace joule::models
