#include "models/bert_model.h"

#include <cmath>
#include <limits>
#include <string>
#include <tuple>

#include "models/dropout.h"

namespace joule::models {
namespace {

namespace nn = torch::nn;

nn::Linear linear(nn::Module& parent, const std::string& name, int64_t in, int64_t out) {
  return parent.register_module(name, nn::Linear(nn::LinearOptions(in, out)));
}

nn::LayerNorm layer_norm(nn::Module& parent, int64_t hidden, double eps) {
  return parent.register_module("LayerNorm", nn::LayerNorm(nn::LayerNormOptions({hidden}).eps(eps)));
}

nn::Embedding embedding(nn::Module& parent, const std::string& name, int64_t rows, int64_t hidden) {
  return parent.register_module(name, nn::Embedding(nn::EmbeddingOptions(rows, hidden)));
}

torch::Tensor maybe_dropout(const torch::Tensor& x, double p, bool training) {
  return training ? train_dropout(x, p) : x;
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

BertModelImpl::BertModelImpl(const BertConfig& config, bool pooler) : config_(config) {
  config_.validate();
  const int64_t h = config.hidden_size;
  const double eps = config.layer_norm_eps;
  const bool layout = config.model_type == "layoutlm";

  auto embeddings = hf_scope(*this, "embeddings");
  word_embeddings_ = embeddings->register_module(
      "word_embeddings", nn::Embedding(nn::EmbeddingOptions(config.vocab_size, h).padding_idx(0)));
  position_embeddings_ = embedding(*embeddings, "position_embeddings", config.max_position_embeddings, h);
  if (layout) {  // LayoutLMEmbeddings' order
    x_embeddings_ = embedding(*embeddings, "x_position_embeddings", config.max_2d_position_embeddings, h);
    y_embeddings_ = embedding(*embeddings, "y_position_embeddings", config.max_2d_position_embeddings, h);
    h_embeddings_ = embedding(*embeddings, "h_position_embeddings", config.max_2d_position_embeddings, h);
    w_embeddings_ = embedding(*embeddings, "w_position_embeddings", config.max_2d_position_embeddings, h);
  }
  token_type_embeddings_ = embedding(*embeddings, "token_type_embeddings", config.type_vocab_size, h);
  embedding_norm_ = layer_norm(*embeddings, h, eps);

  auto encoder = hf_scope(*this, "encoder");
  auto layer_list = hf_scope(*encoder, "layer");
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    auto layer = hf_scope(*layer_list, std::to_string(i));
    auto attention = hf_scope(*layer, "attention");
    auto self = hf_scope(*attention, "self");
    auto attention_output = hf_scope(*attention, "output");
    auto intermediate = hf_scope(*layer, "intermediate");
    auto output = hf_scope(*layer, "output");
    Layer l;
    l.query = linear(*self, "query", h, h);
    l.key = linear(*self, "key", h, h);
    l.value = linear(*self, "value", h, h);
    l.attention_output = linear(*attention_output, "dense", h, h);
    l.attention_norm = layer_norm(*attention_output, h, eps);
    l.intermediate = linear(*intermediate, "dense", h, config.intermediate_size);
    l.output = linear(*output, "dense", config.intermediate_size, h);
    l.output_norm = layer_norm(*output, h, eps);
    layers_.push_back(l);
  }
  if (pooler) pooler_ = linear(*hf_scope(*this, "pooler"), "dense", h, h);
}

torch::Tensor BertModelImpl::embed(const EncoderInput& in) {
  const int64_t len = in.input_ids.size(1);
  TORCH_CHECK(len <= config_.max_position_embeddings, "sequence length ", len, " exceeds max_position_embeddings ",
              config_.max_position_embeddings);
  torch::Tensor x =
      word_embeddings_(in.input_ids) +
      (in.position_ids.defined() ? position_embeddings_(in.position_ids)
                                 : position_embeddings_(torch::arange(len, in.input_ids.options())).unsqueeze(0));
  if (!x_embeddings_.is_empty()) {  // LayoutLM: boxes [B, L, 4] as x0, y0, x1, y1
    TORCH_CHECK(in.bbox.defined() && in.bbox.dim() == 3 && in.bbox.size(2) == 4,
                "a LayoutLM model needs each token's box [batch, length, 4]");
    const torch::Tensor x0 = in.bbox.select(2, 0), y0 = in.bbox.select(2, 1), x1 = in.bbox.select(2, 2),
                        y1 = in.bbox.select(2, 3);
    x = x + x_embeddings_(x0) + y_embeddings_(y0) + x_embeddings_(x1) + y_embeddings_(y1) + h_embeddings_(y1 - y0) +
        w_embeddings_(x1 - x0);
  }
  x = x + (in.token_type_ids.defined() ? token_type_embeddings_(in.token_type_ids)
                                       : token_type_embeddings_->weight[0].view({1, 1, -1}));
  return maybe_dropout(embedding_norm_(x), config_.hidden_dropout_prob, is_training());
}

torch::Tensor BertModelImpl::encode(const EncoderInput& in, const PrecisionOps& ops, bool first_position_only) {
  const int64_t batch = in.input_ids.size(0), len = in.input_ids.size(1);
  const int64_t heads = config_.num_attention_heads, dh = config_.head_dim();
  const double p_residual = is_training() ? config_.hidden_dropout_prob : 0.0;
  const double p_attn = config_.attention_probs_dropout_prob;
  torch::Tensor x = embed(in);

  // Additive mask over keys: 0 for the keys a query sees, the dtype's lowest value for the others. Padded rows:
  // [B, 1, 1, L], every query sees the real tokens. Packed rows: [B, 1, L, L], a query sees its own sequence's tokens.
  const double lowest = std::numeric_limits<float>::lowest();
  torch::Tensor mask_bias =
      in.sequence_index.defined()
          ? in.sequence_index.unsqueeze(2).ne(in.sequence_index.unsqueeze(1)).to(torch::kFloat).mul(lowest).unsqueeze(1)
          : (1.0 - in.attention_mask.to(torch::kFloat)).mul(lowest).view({batch, 1, 1, len});
  const double scale = 1.0 / std::sqrt(static_cast<double>(dh));

  // [B, positions, hidden] -> [B, heads, positions, head_dim]
  auto heads_first = [&](const torch::Tensor& t) { return t.view({batch, t.size(1), heads, dh}).transpose(1, 2); };
  torch::Tensor in_x = ops.operand(x);  // x in the matmul dtype: one cast shared by the matmuls that read it
  for (size_t i = 0; i < layers_.size(); ++i) {
    Layer& l = layers_[i];
    // Where only the first position goes on, its query, and everything after the attention, are that position's.
    const bool first_only = first_position_only && i + 1 == layers_.size();
    const torch::Tensor queried = first_only ? in_x.narrow(1, 0, 1) : in_x;
    const torch::Tensor q = heads_first(ops.linear(queried, l.query));
    const torch::Tensor k = heads_first(ops.linear(in_x, l.key));
    const torch::Tensor v = heads_first(ops.linear(in_x, l.value));
    const torch::Tensor layer_mask = first_only && mask_bias.size(2) > 1 ? mask_bias.narrow(2, 0, 1) : mask_bias;
    const torch::Tensor context = ops.attention(q, k, v, layer_mask, scale, is_training() ? p_attn : 0.0);
    if (first_only) x = x.narrow(1, 0, 1);
    std::tie(x, in_x) = ops.add_layer_norm(ops.linear(context, l.attention_output), x, l.attention_norm, p_residual);
    std::tie(x, in_x) =
        ops.add_layer_norm(ops.feed_forward(in_x, l.intermediate, l.output), x, l.output_norm, p_residual);
  }
  return x;
}

std::vector<std::pair<torch::Tensor, torch::Tensor>> BertModelImpl::feed_forward_weights() const {
  std::vector<std::pair<torch::Tensor, torch::Tensor>> out;
  for (const Layer& l : layers_) out.emplace_back(l.intermediate->weight, l.output->weight);
  return out;
}

torch::Tensor BertModelImpl::pool(const torch::Tensor& hidden, const PrecisionOps& ops) {
  return pool_states(hidden.select(1, 0), ops);
}

torch::Tensor BertModelImpl::pool_states(const torch::Tensor& first_states, const PrecisionOps& ops) {
  TORCH_CHECK(has_pooler(), "this model has no pooler");
  return torch::tanh(ops.linear(first_states, pooler_));
}

PackedLayout packed_layout(const torch::Tensor& lengths, int64_t length) {
  PackedLayout p;
  const torch::Tensor ends = lengths.cumsum(1);  // [B, K]
  p.starts = ends - lengths;
  p.present = lengths.gt(0);
  const torch::Tensor position = torch::arange(length, lengths.options()).view({1, length, 1});
  // A token's sequence: how many sequences end at or before it (the padding: all K of them).
  p.sequence_index = position.ge(ends.unsqueeze(1)).sum(2);  // [B, L] in [0, K]
  const int64_t k = lengths.size(1);
  const torch::Tensor start = p.starts.gather(1, p.sequence_index.clamp_max(k - 1));
  p.position_ids = (position.squeeze(2) - start).mul(p.sequence_index.lt(k));  // padding: position 0
  return p;
}

std::shared_ptr<torch::nn::Module> hf_scope(torch::nn::Module& parent, const std::string& name) {
  return parent.register_module(name, std::make_shared<torch::nn::Module>());
}

void init_bert_weights(torch::nn::Module& module, double initializer_range, uint64_t seed) {
  torch::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(seed);
  for (auto& item : module.named_parameters(/*recurse=*/true)) {
    const std::string& name = item.key();
    torch::Tensor p = item.value();
    torch::Tensor host = torch::empty(p.sizes(), torch::TensorOptions().dtype(torch::kFloat32));
    if (name.find("LayerNorm.weight") != std::string::npos) {
      host.fill_(1.0);
    } else if (p.dim() == 1) {  // biases, LayerNorm biases, the MLM output bias
      host.zero_();
    } else {  // Linear and Embedding weights
      host.normal_(0.0, initializer_range, gen);
    }
    if (ends_with(name, "word_embeddings.weight")) host[0].zero_();  // padding_idx = [PAD] = 0
    p.copy_(host);
  }
}

}  // namespace joule::models
