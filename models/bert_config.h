// BertConfig: the architecture of a BERT model, read from and written to HuggingFace's config.json.
// No LibTorch here: the config, its validation and its closed-form parameter count are plain C++.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "launch/util/error.h"

namespace joule::models {

// Thrown for a config.json that cannot describe a valid BERT; the message names the file and key.
class ModelConfigError : public joule::Error {
 public:
  explicit ModelConfigError(const std::string& message,
                            std::string hint =
                                "fix that key in the model's config.json, or choose a preset "
                                "(bert-tiny, bert-base, bert-large, layoutlm-base)")
      : joule::Error(message, std::move(hint)) {}
};

struct BertConfig {
  int64_t vocab_size = 30522;
  int64_t hidden_size = 768;
  int64_t num_hidden_layers = 12;
  int64_t num_attention_heads = 12;
  int64_t intermediate_size = 3072;
  int64_t max_position_embeddings = 512;
  int64_t type_vocab_size = 2;
  double hidden_dropout_prob = 0.1;
  double attention_probs_dropout_prob = 0.1;
  double layer_norm_eps = 1e-12;
  double initializer_range = 0.02;
  std::string hidden_act = "gelu";  // exact erf GELU; the only activation joule implements
  // "bert", or "layoutlm" (BERT plus 2-D position embeddings of the word boxes, each of max_2d_position_embeddings
  // rows: inference only).
  std::string model_type = "bert";
  int64_t max_2d_position_embeddings = 0;  // layoutlm
  std::vector<std::string> architectures;  // HuggingFace class names, as read ("BertForPreTraining" when written)
  std::vector<std::string> labels;         // id2label, by id (a classification head's num_labels); empty: none given
  // The vocabulary the weights were trained with (FNV-1a-64 of its vocab.txt, as metadata.json records the shards'),
  // written as "joule_vocab_fnv1a64" by joule's runs and exports; "" when unknown. HuggingFace ignores the key.
  std::string vocab_fnv1a64;

  int64_t head_dim() const { return hidden_size / num_attention_heads; }

  // Throws ModelConfigError naming `where` (a file name or "config") when a value is out of range.
  void validate(const std::string& where = "config") const;

  // Parses HuggingFace's config.json text. Every BertConfig size above is required (and
  // max_2d_position_embeddings for LayoutLM); keys that HuggingFace writes into a BERT or LayoutLM config but that
  // do not change the architecture (transformers_version, pad_token_id, ...) are accepted; any other key is an error.
  static BertConfig from_json_text(const std::string& text, const std::string& where);
  static BertConfig from_json_file(const std::string& path);

  // HuggingFace-loadable config.json text ("model_type", "architectures": BertForPreTraining unless set, id2label).
  std::string to_json_text() const;
};

// Parameter counts in closed form (the model's registered parameters must add up to these).
struct ParameterCounts {
  int64_t embeddings = 0;  // word + position + token type + LayerNorm
  int64_t encoder = 0;     // all layers
  int64_t per_layer = 0;
  int64_t pooler = 0;
  int64_t mlm_head = 0;  // transform dense + LayerNorm + output bias (decoder weight is tied)
  int64_t nsp_head = 0;
  int64_t total() const { return embeddings + encoder + pooler + mlm_head + nsp_head; }
};
ParameterCounts parameter_counts(const BertConfig& config);

// Every parameter's HF name and element count, in the order BertForPreTraining registers them (the order of
// hf_named_parameters(), and so of the gradient buckets): for the performance model, without LibTorch.
std::vector<std::pair<std::string, int64_t>> parameter_numels(const BertConfig& config);
// Whether a parameter of that list is a Linear layer's weight (a matmul operand only): a ".weight" that is neither a
// LayerNorm's nor an embedding table. BertForPreTraining::matmul_weight_names() lists the same (a test checks).
bool is_matmul_weight(const std::string& hf_name);

// Resolves a model argument: an existing path to a .json file or to a directory holding config.json,
// or a preset name ("bert-large") looked up in `presets_dir` as NAME.json.
BertConfig load_config(const std::string& path_or_preset, const std::string& presets_dir);

}  // namespace joule::models
