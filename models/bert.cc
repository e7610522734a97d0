#include "models/bert.h"
#include "models/dropout.h"

#include <cmath>
#include <limits>

namespace joule::models {
namespace {

namespace nn = torch::nn;

// An empty module that only gives its children HuggingFace's dotted names.
std::shared_ptr<nn::Module> scope(nn::Module& parent, const std::string& name) {
  return parent.register_module(name, std::make_shared<nn::Module>());
}

nn::Linear linear(nn::Module& parent, const std::string& name, int64_t in, int64_t out) {
  return parent.register_module(name, nn::Linear(nn::LinearOptions(in, out)));
}

nn::LayerNorm layer_norm(nn::Module& parent, int64_t hidden, double eps) {
  return parent.register_module("LayerNorm", nn::LayerNorm(nn::LayerNormOptions({hidden}).eps(eps)));
}

torch::Tensor maybe_dropout(const torch::Tensor& x, double p, bool training) {
  return training ? train_dropout(x, p) : x;
}

}  // namespace

BertForPreTrainingImpl::BertForPreTrainingImpl(const BertConfig& config, uint64_t seed) : config_(config) {
  config_.validate();
  const int64_t h = config.hidden_size;
  const double eps = config.layer_norm_eps;

  auto bert = scope(*this, "bert");
  auto embeddings = scope(*bert, "embeddings");
  word_embeddings_ = embeddings->register_module(
      "word_embeddings", nn::Embedding(nn::EmbeddingOptions(config.vocab_size, h).padding_idx(0)));
  position_embeddings_ = embeddings->register_module(
      "position_embeddings", nn::Embedding(nn::EmbeddingOptions(config.max_position_embeddings, h)));
  token_type_embeddings_ = embeddings->register_module("token_type_embeddings",
                                                       nn::Embedding(nn::EmbeddingOptions(config.type_vocab_size, h)));
  embedding_norm_ = layer_norm(*embeddings, h, eps);

  auto encoder = scope(*bert, "encoder");
  auto layer_list = scope(*encoder, "layer");
  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    auto layer = scope(*layer_list, std::to_string(i));
    auto attention = scope(*layer, "attention");
    auto self = scope(*attention, "self");
    auto attention_output = scope(*attention, "output");
    auto intermediate = scope(*layer, "intermediate");
    auto output = scope(*layer, "output");
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
  pooler_ = linear(*scope(*bert, "pooler"), "dense", h, h);

  auto cls = scope(*this, "cls");
  auto predictions = scope(*cls, "predictions");
  mlm_bias_ = predictions->register_parameter("bias", torch::zeros({config.vocab_size}));
  auto transform = scope(*predictions, "transform");
  mlm_transform_ = linear(*transform, "dense", h, h);
  mlm_norm_ = layer_norm(*transform, h, eps);
  nsp_ = linear(*cls, "seq_relationship", h, 2);

  init_weights(seed);
}

void BertForPreTrainingImpl::init_weights(uint64_t seed) {
  torch::NoGradGuard no_grad;
  auto gen = at::detail::createCPUGenerator(seed);
  const double std = config_.initializer_range;
  for (auto& item : named_parameters(/*recurse=*/true)) {
    const std::string& name = item.key();
    torch::Tensor p = item.value();
    torch::Tensor host = torch::empty(p.sizes(), torch::TensorOptions().dtype(torch::kFloat32));
    if (name.find("LayerNorm.weight") != std::string::npos) {
      host.fill_(1.0);
    } else if (p.dim() == 1) {  // biases, LayerNorm biases, the MLM output bias
      host.zero_();
    } else {  // Linear and Embedding weights
      host.normal_(0.0, std, gen);
    }
    if (name == "bert.embeddings.word_embeddings.weight") host[0].zero_();  // padding_idx = [PAD] = 0
    p.copy_(host);
  }
}

torch::Tensor BertForPreTrainingImpl::encode(const PretrainingBatch& b) {
  const int64_t batch = b.input_ids.size(0), len = b.input_ids.size(1);
  const int64_t h = config_.hidden_size, heads = config_.num_attention_heads, dh = config_.head_dim();
  TORCH_CHECK(len <= config_.max_position_embeddings, "sequence length ", len, " exceeds max_position_embeddings ",
              config_.max_position_embeddings);
  const double p_hidden = config_.hidden_dropout_prob, p_attn = config_.attention_probs_dropout_prob;

  auto positions = torch::arange(len, b.input_ids.options());
  torch::Tensor x = word_embeddings_(b.input_ids) + position_embeddings_(positions).unsqueeze(0) +
                    token_type_embeddings_(b.token_type_ids);
  x = maybe_dropout(embedding_norm_(x), p_hidden, is_training());

  // Additive mask over keys: 0 for real tokens, the dtype's lowest value for padding. [B, 1, 1, L]
  const double lowest = std::numeric_limits<float>::lowest();
  torch::Tensor mask_bias = (1.0 - b.attention_mask.to(torch::kFloat)).mul(lowest).view({batch, 1, 1, len});
  const double scale = 1.0 / std::sqrt(static_cast<double>(dh));

  auto heads_first = [&](const torch::Tensor& t) { return t.view({batch, len, heads, dh}).transpose(1, 2); };
  const bool scale_in_softmax = ops_.attention_scale_in_softmax();
  for (Layer& l : layers_) {
    const torch::Tensor in = ops_.operand(x);  // one cast shared by the three projections
    torch::Tensor query = ops_.linear(in, l.query);
    torch::Tensor q = heads_first(scale_in_softmax ? query : query.mul_(scale));
    torch::Tensor k = heads_first(ops_.linear(in, l.key));
    torch::Tensor v = heads_first(ops_.linear(in, l.value));
    torch::Tensor probs = ops_.attention_probs(torch::matmul(q, k.transpose(-1, -2)), mask_bias, scale);
    probs = maybe_dropout(probs, p_attn, is_training());
    torch::Tensor context = torch::matmul(probs, v).transpose(1, 2).reshape({batch, len, h});
    x = ops_.layer_norm(maybe_dropout(ops_.linear(context, l.attention_output), p_hidden, is_training()) + x,
                        l.attention_norm);
    torch::Tensor inner = torch::gelu(ops_.linear(x, l.intermediate));
    x = ops_.layer_norm(maybe_dropout(ops_.linear(inner, l.output), p_hidden, is_training()) + x, l.output_norm);
  }
  return x;
}

torch::Tensor BertForPreTrainingImpl::mlm_logits(const torch::Tensor& hidden) {
  torch::Tensor t = ops_.layer_norm(torch::gelu(ops_.linear(hidden, mlm_transform_)), mlm_norm_);
  return ops_.for_loss(ops_.linear(t, word_embeddings_->weight, mlm_bias_));
}

PretrainingOutput BertForPreTrainingImpl::forward(const PretrainingBatch& b, const ForwardOptions& options) {
  if (b.input_ids.device() != device()) return forward(b.to(device()), options);
  const int64_t batch = b.input_ids.size(0), h = config_.hidden_size;
  torch::Tensor x = encode(b);

  torch::Tensor pooled = torch::tanh(ops_.linear(x.select(1, 0), pooler_));
  torch::Tensor nsp_logits = ops_.for_loss(ops_.linear(pooled, nsp_));

  // A row's predictions end at its first 0 position (NVIDIA's loader convention).
  torch::Tensor valid = (b.masked_positions != 0).to(torch::kInt64).cumprod(1).to(torch::kBool);  // [B, P]
  torch::Tensor labels = b.masked_ids.masked_select(valid);                                       // [M]
  torch::Tensor logits;                                                                           // [M, V]
  if (options.mlm_head == MlmHeadMode::kMaskedOnly) {
    torch::Tensor index = b.masked_positions.masked_select(valid);  // [M] positions
    torch::Tensor rows = torch::arange(batch, index.options()).unsqueeze(1).expand_as(valid).masked_select(valid);
    torch::Tensor gathered = x.view({-1, h}).index_select(0, rows * x.size(1) + index);  // [M, H]
    logits = mlm_logits(gathered);
  } else {
    torch::Tensor all = mlm_logits(x);  // [B, L, V]
    torch::Tensor picked = all.gather(1, b.masked_positions.unsqueeze(-1).expand({-1, -1, all.size(-1)}));
    logits = picked.masked_select(valid.unsqueeze(-1)).view({-1, all.size(-1)});
  }

  PretrainingOutput out;
  out.mlm_loss = torch::nn::functional::cross_entropy(logits, labels);
  out.nsp_loss = torch::nn::functional::cross_entropy(nsp_logits, b.next_sentence_labels);
  out.loss = out.mlm_loss + out.nsp_loss;
  out.mlm_predictions = labels.size(0);
  if (options.keep_logits) {
    out.mlm_logits = logits;
    out.nsp_logits = nsp_logits;
  }
  if (options.compute_accuracy) {
    torch::NoGradGuard no_grad;
    out.mlm_correct = logits.argmax(-1).eq(labels).sum();
    out.nsp_correct = nsp_logits.argmax(-1).eq(b.next_sentence_labels).sum();
  }
  return out;
}

std::vector<std::pair<std::string, torch::Tensor>> BertForPreTrainingImpl::hf_named_parameters() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : named_parameters(/*recurse=*/true)) out.emplace_back(item.key(), item.value());
  return out;
}

std::vector<std::string> BertForPreTrainingImpl::matmul_weight_names() const {
  std::vector<std::string> out;
  for (const auto& item : named_modules("", /*include_self=*/false))
    if (std::dynamic_pointer_cast<torch::nn::LinearImpl>(item.value())) out.push_back(item.key() + ".weight");
  return out;
}

bool is_no_decay_parameter(const std::string& name) {
  auto ends_with = [&](const std::string& s) {
    return name.size() >= s.size() && name.compare(name.size() - s.size(), s.size(), s) == 0;
  };
  return ends_with("bias") || name.find("LayerNorm") != std::string::npos;
}

PretrainingBatch synthetic_batch(const BertConfig& config, int64_t batch, int64_t seq_len, int64_t max_predictions,
                                 uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  PretrainingBatch b;
  b.input_ids = torch::randint(5, config.vocab_size, {batch, seq_len}, gen, i64);
  b.input_ids.select(1, 0).fill_(2);  // [CLS]
  b.token_type_ids = torch::zeros({batch, seq_len}, i64);
  b.token_type_ids.narrow(1, seq_len / 2, seq_len - seq_len / 2).fill_(1);
  b.attention_mask = torch::ones({batch, seq_len}, i64);
  // Distinct masked positions in 1..seq_len-1, sorted, as create_pretraining_data writes them.
  const int64_t p = std::min<int64_t>(max_predictions, seq_len - 1);
  b.masked_positions = torch::zeros({batch, max_predictions}, i64);
  for (int64_t r = 0; r < batch; ++r) {
    torch::Tensor perm = torch::randperm(seq_len - 1, gen, i64).narrow(0, 0, p).add_(1);
    b.masked_positions[r].narrow(0, 0, p).copy_(std::get<0>(perm.sort()));
  }
  b.masked_ids = torch::randint(5, config.vocab_size, {batch, max_predictions}, gen, i64)
                     .mul_((b.masked_positions != 0).to(torch::kInt64));
  b.next_sentence_labels = torch::randint(0, 2, {batch}, gen, i64);
  return b;
}

}  // namespace joule::models
