#include "models/encoder_model.h"

#include <filesystem>
#include <optional>

#include "launch/util/error.h"
#include "launch/util/file_io.h"
#include "models/model_dir.h"

namespace joule::models {
namespace {

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

std::string dotted(const std::string& prefix) { return prefix.empty() ? "" : prefix + "."; }

// Where a file keeps the encoder: the prefix of its word embeddings ("" , "bert." or "layoutlm."), or nullopt.
std::optional<std::string> encoder_prefix_in(const safetensors::File& file) {
  const std::string key = "embeddings.word_embeddings.weight";
  for (const auto& t : file.tensors())
    if (t.name.size() >= key.size() && t.name.compare(t.name.size() - key.size(), key.size(), key) == 0)
      return t.name.substr(0, t.name.size() - key.size());
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
    throw ConfigError("a " + architecture.name + " needs a \"" + architecture.model_type +
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

EncoderOutput EncoderModel::forward(const EncoderInput& input) {
  c10::InferenceMode inference;
  EncoderOutput out;
  out.hidden = encoder_->encode(input, ops_);
  if (encoder_->has_pooler()) out.pooled = ops_.for_loss(encoder_->pool(out.hidden, ops_));
  if (architecture_.head == Head::kSequence) out.logits = ops_.for_loss(ops_.linear(out.pooled, classifier_));
  if (architecture_.head == Head::kToken) out.logits = ops_.for_loss(ops_.linear(out.hidden, classifier_));
  return out;
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
  LoadedEncoderModel loaded{EncoderModel(config, a, n), {}};
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
    std::string kept;
    for (const std::string& k : load.kept) kept += (kept.empty() ? "" : ", ") + k;
    loaded.notes.push_back(dir + " has no " + kept + ": initialized (normal(0, " +
                           std::to_string(config.initializer_range) + "), zero bias, seed 0); fine-tune before use");
  }
  if (!load.skipped.empty())
    loaded.notes.push_back(std::to_string(load.skipped.size()) + " tensor(s) of " + dir + " unused by a " + a.name +
                           " (the first: " + load.skipped.front() + ")");
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
