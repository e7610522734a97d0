#include "models/bert.h"
#include "models/dropout.h"

#include <cmath>
#include <limits>
#include <optional>

namespace joule::models {
namespace nn = torch::nn;

BertForPreTrainingImpl::BertForPreTrainingImpl(const BertConfig& config, uint64_t seed) : config_(config) {
  config_.validate();
  if (config.model_type != "bert")
    throw ModelConfigError("model_type is \"" + config.model_type + "\": joule pretrains BERT (\"bert\") models; a " +
                               config.model_type + " model is for joule infer",
                           "give joule train a BERT config (a preset: bert-tiny, bert-base, bert-large)");
  const int64_t h = config.hidden_size;
  bert_ = register_module("bert", BertModel(config, /*pooler=*/true));
  auto cls = hf_scope(*this, "cls");
  auto predictions = hf_scope(*cls, "predictions");
  mlm_bias_ = predictions->register_parameter("bias", torch::zeros({config.vocab_size}));
  auto transform = hf_scope(*predictions, "transform");
  mlm_transform_ = transform->register_module("dense", nn::Linear(nn::LinearOptions(h, h)));
  mlm_norm_ =
      transform->register_module("LayerNorm", nn::LayerNorm(nn::LayerNormOptions({h}).eps(config.layer_norm_eps)));
  nsp_ = cls->register_module("seq_relationship", nn::Linear(nn::LinearOptions(h, 2)));
  init_weights(seed);
}

void BertForPreTrainingImpl::init_weights(uint64_t seed) { init_bert_weights(*this, config_.initializer_range, seed); }

torch::Tensor BertForPreTrainingImpl::mlm_logits(const torch::Tensor& hidden) {
  torch::Tensor t = ops_.layer_norm(ops_.linear_gelu(hidden, mlm_transform_), mlm_norm_);
  return ops_.for_loss(ops_.linear(t, bert_->word_embeddings(), mlm_bias_));
}

PretrainingOutput BertForPreTrainingImpl::forward(const PretrainingBatch& b, const ForwardOptions& options) {
  if (b.input_ids.device() != device()) return forward(b.to(device()), options);
  std::optional<DropoutRows> keyed;  // a run's rows: masks keyed by the rows, not by the rank layout
  if (is_training() && b.rows) keyed.emplace(b.rows->seed, b.rows->first_row);
  const int64_t batch = b.input_ids.size(0), len = b.input_ids.size(1), h = config_.hidden_size;
  torch::Tensor x, pooled, nsp_labels;
  if (b.packed()) {
    // Each sequence of a row on its own: its positions from 0, attention within it, NSP at its [CLS].
    const PackedLayout layout = packed_layout(b.sequence_lengths, len);
    x = bert_->encode({b.input_ids, b.token_type_ids, {}, {}, layout.position_ids, layout.sequence_index}, ops_);
    const torch::Tensor rows = torch::arange(batch, layout.starts.options()).unsqueeze(1).expand_as(layout.starts);
    const torch::Tensor cls = (rows * len + layout.starts).masked_select(layout.present);  // [S]
    pooled = bert_->pool_states(x.reshape({-1, h}).index_select(0, cls), ops_);
    nsp_labels = b.next_sentence_labels.masked_select(layout.present);
  } else {
    x = bert_->encode({b.input_ids, b.token_type_ids, b.attention_mask, {}, {}, {}}, ops_);
    pooled = bert_->pool(x, ops_);
    nsp_labels = b.next_sentence_labels;
  }
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
  out.nsp_loss = torch::nn::functional::cross_entropy(nsp_logits, nsp_labels);
  out.loss = out.mlm_loss + out.nsp_loss;
  out.mlm_predictions = labels.size(0);
  if (options.keep_logits) {
    out.mlm_logits = logits;
    out.nsp_logits = nsp_logits;
  }
  if (options.compute_accuracy) {
    torch::NoGradGuard no_grad;
    out.mlm_correct = logits.argmax(-1).eq(labels).sum();
    out.nsp_correct = nsp_logits.argmax(-1).eq(nsp_labels).sum();
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
