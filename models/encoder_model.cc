#include "models/encoder_model.h"

#include <algorithm>
#include <filesystem>
#include <optional>
#include <set>

#include "launch/util/error.h"
#include "launch/util/file_io.h"
#include "models/model_dir.h"

namespace joule::models {
namespace {

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

std::string dotted(const std::string& prefix) { return prefix.empty() ? "" : prefix + "."; }

// Where a file keeps the encoder: "", "bert." or "layoutlm." (the prefix of its word embeddings), or nullopt.
std::optional<std::string> encoder_prefix_in(const safetensors::File& file) {
  for (const char* prefix : {"", "bert.", "layoutlm."})
    if (file.find(std::string(prefix) + "embeddings.word_embeddings.weight")) return std::string(prefix);
  return std::nullopt;
}

}  // namespace

const std::vector<Architecture>& inference_architectures() {
  static const std::vector<Architecture> all = {
      {"BertModel", "bert", Head::kNone, true, ""},
      {"BertForSequenceClassification", "bert", Head::kSequence, true, "bert"},
      {"BertForTokenClassification", "bert", Head::kToken, false, "bert"},
      {"LayoutLMModel", "layoutlm", Head::kNone, true, ""},
      {"LayoutLMForSequenceClassification", "layoutlm", Head::kSequence, true, "layoutlm"},
      {"LayoutLMForTokenClassification", "layoutlm", Head::kToken, true, "layoutlm"}};
  return all;
}

const Architecture& architecture_named(const std::string& hf_class) {
  std::string names;
  for (const Architecture& a : inference_architectures()) {
    if (a.name == hf_class) return a;
    names += (names.empty() ? "" : ", ") + a.name;
  }
  throw joule::UsageError("architecture \"" + hf_class + "\" is not one joule runs for inference",
                          "choose one of: " + names);
}

EncoderModel::EncoderModel(const BertConfig& config, const Architecture& architecture, int64_t labels, uint64_t seed)
    : config_(config), architecture_(architecture), labels_(labels) {
  if (config.model_type != architecture.model_type)
    throw ModelConfigError("a " + architecture.name + " needs a \"" + architecture.model_type +
                               "\" config; this config.json's model_type is \"" + config.model_type + "\"",
                           "give the architecture of the model the directory holds (config.json \"architectures\")");
  if (architecture.head != Head::kNone && (labels < 1 || labels > 65536))
    throw joule::UsageError("a " + architecture.name + " needs 1 to 65536 labels, not " + std::to_string(labels));
  torch::nn::Module holder;  // the HuggingFace names, for one initialization in their order
  encoder_ = architecture.prefix.empty()
                 ? BertModel(config, architecture.pooler)
                 : holder.register_module(architecture.prefix, BertModel(config, architecture.pooler));
  if (architecture.head != Head::kNone)
    classifier_ =
        holder.register_module("classifier", torch::nn::Linear(torch::nn::LinearOptions(config.hidden_size, labels)));
  if (architecture.prefix.empty())
    init_bert_weights(*encoder_, config.initializer_range, seed);
  else
    init_bert_weights(holder, config.initializer_range, seed);
  encoder_->eval();
  if (!classifier_.is_empty()) classifier_->eval();
}

namespace {

// An id outside its embedding table is the caller's mistake, named (LibTorch would only say "index out of range").
void check_ids(const torch::Tensor& t, const char* name, int64_t rows, const char* table) {
  if (!t.defined() || t.numel() == 0) return;
  const int64_t lo = t.min().item<int64_t>(), hi = t.max().item<int64_t>();
  if (lo < 0 || hi >= rows)
    throw joule::UsageError(std::string(name) + " holds " + std::to_string(lo < 0 ? lo : hi) +
                            ", outside the model's " + table + " (0 to " + std::to_string(rows - 1) + ")");
}

}  // namespace

EncoderOutput EncoderModel::forward(const EncoderInput& input, Outputs outputs) {
  c10::InferenceMode inference;
  check_ids(input.input_ids, "input_ids", config_.vocab_size, "vocabulary (vocab_size)");
  check_ids(input.token_type_ids, "token_type_ids", config_.type_vocab_size, "segments (type_vocab_size)");
  if (config_.model_type == "layoutlm" && input.bbox.defined()) {
    check_ids(input.bbox, "bbox", config_.max_2d_position_embeddings, "box space (max_2d_position_embeddings)");
    const torch::Tensor b = input.bbox;
    if ((b.select(-1, 2) < b.select(-1, 0)).any().item<bool>() ||
        (b.select(-1, 3) < b.select(-1, 1)).any().item<bool>())
      throw joule::UsageError("bbox holds a box with x1 < x0 or y1 < y0 (LayoutLM's boxes are x0, y0, x1, y1)");
  }
  EncoderOutput out;
  out.hidden = encoder_->encode(input, ops_, first_position_only(outputs));
  if (encoder_->has_pooler()) out.pooled = ops_.for_loss(encoder_->pool(out.hidden, ops_));
  if (architecture_.head == Head::kSequence) out.logits = ops_.for_loss(ops_.linear(out.pooled, classifier_));
  if (architecture_.head == Head::kToken) out.logits = ops_.for_loss(ops_.linear(out.hidden, classifier_));
  return out;
}

void EncoderModel::set_precision(Precision precision, launch::Fp32Gemm fp32_gemm) {
  const PrecisionOps ops(precision, fp32_gemm);
  // A Linear layer's weight is 2-D outside the embeddings; its bias is the 1-D tensor beside it.
  std::vector<torch::Tensor> matmul;
  const auto named = hf_named_parameters();
  for (const auto& [name, p] : named) {
    if (name.find("embeddings.") != std::string::npos || p.dim() != 2) continue;
    matmul.push_back(p);
    const std::string bias = name.substr(0, name.size() - std::string("weight").size()) + "bias";
    for (const auto& [other, q] : named)
      if (other == bias) matmul.push_back(q);
  }
  const torch::ScalarType held = ops.compute_dtype();
  for (const torch::Tensor& p : matmul)
    if (p.scalar_type() != held && held == torch::kFloat)
      throw joule::InternalError("EncoderModel::set_precision: fp32 after the weights were held in " +
                                 std::string(c10::toString(p.scalar_type())) + ": load the model again");
  torch::NoGradGuard no_grad;
  for (torch::Tensor p : matmul)
    if (p.scalar_type() != held) p.set_data(p.to(held));
  ops_ = ops;
  if (held == torch::kBFloat16) {  // the weights no longer change: pack them once for oneDNN's GEMMs
    auto packed = std::make_shared<PackedWeights>();
    std::set<const c10::TensorImpl*> in_blocks;  // the feed-forward blocks' weights, packed in chunks as pairs
    for (const auto& [up, down] : encoder_->feed_forward_weights())
      if (packed->add_feed_forward(up, down)) in_blocks.insert({up.unsafeGetTensorImpl(), down.unsafeGetTensorImpl()});
    for (const torch::Tensor& p : matmul)
      if (p.dim() == 2 && !in_blocks.count(p.unsafeGetTensorImpl())) packed->add(p);
    if (packed->size() > 0) ops_.use_packed_weights(std::move(packed));
  }
}

std::vector<std::pair<std::string, torch::Tensor>> EncoderModel::hf_named_parameters() const {
  std::vector<std::pair<std::string, torch::Tensor>> out;
  for (const auto& item : encoder_->named_parameters(/*recurse=*/true))
    out.emplace_back(dotted(architecture_.prefix) + item.key(), item.value());
  if (!classifier_.is_empty()) {
    out.emplace_back("classifier.weight", classifier_->weight);
    out.emplace_back("classifier.bias", classifier_->bias);
  }
  return out;
}

LoadedEncoderModel load_encoder_model(const std::string& dir, const std::string& architecture, int64_t labels) {
  const BertConfig config = BertConfig::from_json_file(dir + "/config.json");
  std::string name = architecture;
  if (name.empty()) {
    if (config.architectures.empty())
      throw joule::UsageError(dir + "/config.json names no architecture", "name one (--architecture)");
    name = config.architectures.front();
    if (name == "BertForPreTraining")
      throw joule::UsageError(dir +
                              " holds a BertForPreTraining (a pretraining run's model): name the architecture "
                              "to run its encoder as (--architecture BertForSequenceClassification, ...)");
  }
  const Architecture& a = architecture_named(name);
  const int64_t n = labels > 0 ? labels : config.labels.empty() ? 2 : static_cast<int64_t>(config.labels.size());
  LoadedEncoderModel loaded{EncoderModel(config, a, n), {}, ""};
  const std::string path = dir + "/model.safetensors";
  const std::string file_prefix = encoder_prefix_in(safetensors::File::open(path)).value_or(dotted(a.prefix));
  const std::string model_prefix = dotted(a.prefix);
  WeightMatch match;
  match.model = a.name;
  match.file_name = [&](const std::string& p) {
    return starts_with(p, "classifier.") ? p : file_prefix + p.substr(model_prefix.size());
  };
  match.may_skip = [&](const std::string& t) {
    return starts_with(t, "cls.") || t == file_prefix + "embeddings.position_ids" ||
           (!a.pooler && starts_with(t, file_prefix + "pooler.")) ||
           (a.head == Head::kNone && starts_with(t, "classifier."));
  };
  match.may_keep = [&](const std::string& p) {
    return starts_with(p, "classifier.") || starts_with(p, model_prefix + "pooler.");
  };
  const WeightLoad load = load_matching(loaded.model.hf_named_parameters(), path, match);
  if (!load.kept.empty()) {
    std::string& kept = loaded.initialized;
    for (const std::string& k : load.kept) kept += (kept.empty() ? "" : ", ") + k;
    // A layer is wholly there or wholly initialized: half of one (a weight without its bias) is a damaged file.
    for (const std::string& k : load.kept) {
      const std::string other =
          k.substr(0, k.rfind('.')) + (k.size() > 5 && k.substr(k.size() - 5) == ".bias" ? ".weight" : ".bias");
      if (std::find(load.kept.begin(), load.kept.end(), other) == load.kept.end())
        throw safetensors::FormatError(path + ": has '" + match.file_name(other) + "' but not '" + match.file_name(k) +
                                       "'");
    }
    loaded.loading_notes.push_back(dir + " has no " + kept + ": initialized (normal(0, " +
                                   std::to_string(config.initializer_range) +
                                   "), zero bias, seed 0); fine-tune before use");
  }
  if (!load.skipped.empty())
    loaded.loading_notes.push_back(std::to_string(load.skipped.size()) + " tensor(s) of " + dir + " unused by a " +
                                   a.name + " (the first: " + load.skipped.front() + ")");
  return loaded;
}

void save_encoder_model(const EncoderModel& model, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw joule::IoError("cannot create the model directory " + dir + ": " + ec.message());
  write_weights(model.hf_named_parameters(), dir + "/model.safetensors");
  BertConfig config = model.config();
  config.architectures = {model.architecture().name};
  if (model.architecture().head != Head::kNone && static_cast<int64_t>(config.labels.size()) != model.labels()) {
    config.labels.clear();
    for (int64_t k = 0; k < model.labels(); ++k) config.labels.push_back("LABEL_" + std::to_string(k));
  }
  joule::write_file_atomically(dir + "/config.json", config.to_json_text());
}

}  // namespace joule::models
