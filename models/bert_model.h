// The BERT encoder every joule model shares: embeddings, the transformer layers and the pooler, with HuggingFace's
// names under wherever its owner registers it ("bert" in BertForPreTraining and the BERT heads, "layoutlm" in
// LayoutLM's). LayoutLM's embeddings add the 2-D position embeddings of each token's box (x0, y0, x1, y1 and its
// height and width, in the 0-1000 box space) to BERT's. The arithmetic of forward is the caller's PrecisionOps.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include "models/bert_config.h"
#include "models/precision_ops.h"

namespace joule::models {

// One batch for the encoder, [B, L] int64 each (bbox [B, L, 4] int64, LayoutLM only; token_type_ids may be
// undefined: all 0).
struct EncoderInput {
  torch::Tensor input_ids, token_type_ids, attention_mask, bbox;
  // Packed rows (several sequences one after another in a row; attention_mask is then unused): each token's position
  // in its own sequence, and which of the row's sequences it belongs to (0, 1, ...; the padding after the last one
  // shares one more index). A token attends only to the tokens of its own sequence. Undefined otherwise.
  torch::Tensor position_ids, sequence_index;
};

// The packed-row inputs of a batch whose rows hold sequences of `lengths` [B, K] one after another from position 0
// (0 after a row's last sequence), for rows of `length` tokens.
struct PackedLayout {
  torch::Tensor position_ids, sequence_index;  // [B, length] each, as EncoderInput wants them
  torch::Tensor starts;                        // [B, K] where each sequence begins (its [CLS])
  torch::Tensor present;                       // [B, K] bool: the slot holds a sequence
};
PackedLayout packed_layout(const torch::Tensor& lengths, int64_t length);

class BertModelImpl : public torch::nn::Module {
 public:
  // `pooler`: whether the model has one (BertForTokenClassification has none). LayoutLM's embeddings where
  // config.model_type is "layoutlm".
  BertModelImpl(const BertConfig& config, bool pooler);

  // [B, L, H] final hidden states (fp32); dropout while training. `first_position_only`: the last layer computes only
  // the first position's state (the [CLS] one a pooler reads; its keys and values still from every position), the
  // same values there up to rounding, and the result is [B, 1, H]: for a head that reads nothing else.
  torch::Tensor encode(const EncoderInput& in, const PrecisionOps& ops, bool first_position_only = false);
  // tanh(dense(first token)) [B, H] (fp32 in, the matmul dtype out).
  torch::Tensor pool(const torch::Tensor& hidden, const PrecisionOps& ops);
  // The same of given first-token states [N, H] (packed rows: each sequence's [CLS]).
  torch::Tensor pool_states(const torch::Tensor& first_states, const PrecisionOps& ops);
  bool has_pooler() const { return !pooler_.is_empty(); }
  // Each layer's feed-forward weights: {intermediate (up), output (down)}.
  std::vector<std::pair<torch::Tensor, torch::Tensor>> feed_forward_weights() const;
  const torch::Tensor& word_embeddings() const { return word_embeddings_->weight; }

 private:
  struct Layer {
    torch::nn::Linear query{nullptr}, key{nullptr}, value{nullptr}, attention_output{nullptr};
    torch::nn::LayerNorm attention_norm{nullptr};
    torch::nn::Linear intermediate{nullptr}, output{nullptr};
    torch::nn::LayerNorm output_norm{nullptr};
  };
  torch::Tensor embed(const EncoderInput& in);  // embeddings -> LayerNorm -> dropout

  BertConfig config_;
  torch::nn::Embedding word_embeddings_{nullptr}, position_embeddings_{nullptr}, token_type_embeddings_{nullptr};
  // LayoutLM: x (x0 and x1), y (y0 and y1), height (y1 - y0) and width (x1 - x0).
  torch::nn::Embedding x_embeddings_{nullptr}, y_embeddings_{nullptr}, h_embeddings_{nullptr}, w_embeddings_{nullptr};
  torch::nn::LayerNorm embedding_norm_{nullptr};
  std::vector<Layer> layers_;
  torch::nn::Linear pooler_{nullptr};
};
TORCH_MODULE(BertModel);

// An empty module registered in `parent` as `name`, only to give its children HuggingFace's dotted names.
std::shared_ptr<torch::nn::Module> hf_scope(torch::nn::Module& parent, const std::string& name);

// HuggingFace's initialization of a BERT-family module's parameters from `seed`, in the order they are registered:
// normal(0, initializer_range) for Linear weights and embeddings, zero biases, LayerNorm 1/0, the [PAD] (0) row of
// `*word_embeddings.weight` zero. Independent of torch's global generator.
void init_bert_weights(torch::nn::Module& module, double initializer_range, uint64_t seed);

}  // namespace joule::models
