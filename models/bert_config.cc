#include "models/bert_config.h"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "launch/util/file_io.h"
#include "launch/util/json_field.h"

namespace joule::models {
namespace {

using nlohmann::json;

// Keys HuggingFace's BertConfig writes that carry no architectural meaning for joule, with the
// values joule accepts where the value would matter.
const std::set<std::string> kIgnoredKeys = {"transformers_version",
                                            "pad_token_id",
                                            "bos_token_id",
                                            "eos_token_id",
                                            "gradient_checkpointing",
                                            "use_cache",
                                            "classifier_dropout",
                                            "torch_dtype",
                                            "dtype",
                                            "_name_or_path",
                                            "output_past",
                                            "directionality",
                                            "pooler_fc_size",
                                            "pooler_num_attention_heads",
                                            "pooler_num_fc_layers",
                                            "pooler_size_per_head",
                                            "pooler_type",
                                            "is_decoder",
                                            "add_cross_attention",
                                            "tie_word_embeddings",
                                            "chunk_size_feed_forward",
                                            "label2id",
                                            "problem_type"};

const char* kRequiredKeys[] = {"vocab_size",          "hidden_size",         "num_hidden_layers",
                               "num_attention_heads", "intermediate_size",   "max_position_embeddings",
                               "type_vocab_size",     "hidden_dropout_prob", "attention_probs_dropout_prob",
                               "layer_norm_eps",      "initializer_range",   "hidden_act"};

std::string list_keys() {
  std::string s;
  for (const char* k : kRequiredKeys) s += std::string(s.empty() ? "" : ", ") + k;
  return s;
}

[[noreturn]] void fail(const std::string& where, const std::string& what) {
  throw ModelConfigError(where + ": " + what);
}

int64_t get_int(const json& j, const char* key, const std::string& where) {
  const json& v = j.at(key);
  if (!v.is_number_integer()) fail(where, std::string("key '") + key + "' must be an integer, found " + v.dump());
  return v.get<int64_t>();
}

double get_double(const json& j, const char* key, const std::string& where) {
  const json& v = j.at(key);
  if (!v.is_number()) fail(where, std::string("key '") + key + "' must be a number, found " + v.dump());
  return v.get<double>();
}

}  // namespace

void BertConfig::validate(const std::string& where) const {
  // Each size in [1, its largest]: the largest are beyond any BERT (Large: 30522, 1024, 24, 16, 4096, 512, 2) and
  // keep every product joule forms in 64 bits; a value past them is a typo, refused naming the key before the
  // model is allocated.
  auto in_range = [&](int64_t v, const char* key, int64_t largest, const char* why) {
    if (v < 1 || v > largest)
      fail(where, std::string("'") + key + "' must be in [1, " + std::to_string(largest) + "] (" + why + "), found " +
                      std::to_string(v));
  };
  in_range(vocab_size, "vocab_size", INT32_MAX, "token ids are 32-bit");
  in_range(hidden_size, "hidden_size", 65536, "BERT-Large: 1024");
  in_range(num_hidden_layers, "num_hidden_layers", 4096, "BERT-Large: 24");
  in_range(num_attention_heads, "num_attention_heads", hidden_size, "at most hidden_size");
  in_range(intermediate_size, "intermediate_size", 262144, "BERT-Large: 4096");
  in_range(max_position_embeddings, "max_position_embeddings", 65536,
           "joule data create writes sequences of at most 65535 tokens");
  in_range(type_vocab_size, "type_vocab_size", 65536, "BERT: 2");
  if (model_type != "bert" && model_type != "layoutlm")
    fail(where, "'model_type' is \"" + model_type + "\"; joule reads \"bert\" and \"layoutlm\" models");
  if (model_type == "layoutlm" && (max_2d_position_embeddings < 1001 || max_2d_position_embeddings > 65536))
    fail(where,
         "'max_2d_position_embeddings' must be in [1001, 65536] (LayoutLM's boxes span 0-1000; its models have "
         "1024), found " +
             std::to_string(max_2d_position_embeddings));
  // Data-parallel training keeps weights, gradients and two LAMB moments on every rank: 16 bytes a parameter in
  // fp32. 2^36 parameters (1.1 TB of such state) is past any one node; the allocator's refusal would name no key.
  if (const int64_t total = parameter_counts(*this).total(); total > (int64_t{1} << 36))
    fail(where, "these sizes make a model of " + std::to_string(total) +
                    " parameters (more than 2^36: over 1.1 TB of weights, gradients and optimizer state per rank); "
                    "BERT-Large has 336 million");
  if (hidden_size % num_attention_heads != 0)
    fail(where, "hidden_size " + std::to_string(hidden_size) + " is not divisible by num_attention_heads " +
                    std::to_string(num_attention_heads));
  auto probability = [&](double p, const char* key) {
    if (!(p >= 0.0 && p < 1.0)) fail(where, std::string("'") + key + "' must be in [0, 1), found " + std::to_string(p));
  };
  probability(hidden_dropout_prob, "hidden_dropout_prob");
  probability(attention_probs_dropout_prob, "attention_probs_dropout_prob");
  if (!(layer_norm_eps > 0.0))
    fail(where, "'layer_norm_eps' must be positive, found " + std::to_string(layer_norm_eps));
  if (!(initializer_range > 0.0))
    fail(where, "'initializer_range' must be positive, found " + std::to_string(initializer_range));
  if (hidden_act != "gelu")
    fail(where, "'hidden_act' is \"" + hidden_act + "\"; joule implements only \"gelu\" (exact erf GELU)");
}

BertConfig BertConfig::from_json_text(const std::string& text, const std::string& where) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    throw ModelConfigError(
        where + ": " + joule::json_syntax_problem(text, e),
        "a model's config.json is a JSON object (HuggingFace's BertConfig): fix or replace the file");
  }
  if (!j.is_object()) fail(where, "expected a JSON object at the top level");

  if (j.contains("model_type") && j.at("model_type") != "bert" && j.at("model_type") != "layoutlm")
    fail(where, "'model_type' is " + j.at("model_type").dump() + "; joule reads \"bert\" and \"layoutlm\" models");
  std::set<std::string> known(std::begin(kRequiredKeys), std::end(kRequiredKeys));
  for (const auto& [key, value] : j.items()) {
    if (known.count(key) || kIgnoredKeys.count(key) || key == "model_type") continue;
    if (key == "architectures" || key == "id2label" || key == "joule_vocab_fnv1a64") continue;  // read below
    if (key == "max_2d_position_embeddings" && j.value("model_type", "") == "layoutlm") continue;
    if (key == "position_embedding_type") {
      if (value != "absolute")
        fail(where, "'position_embedding_type' is " + value.dump() + "; only \"absolute\" is supported");
      continue;
    }
    fail(where, "unknown key '" + key + "'; a BERT config has: " + list_keys());
  }
  for (const char* key : kRequiredKeys)
    if (!j.contains(key)) fail(where, std::string("missing key '") + key + "'; a BERT config has: " + list_keys());

  BertConfig c;
  c.vocab_size = get_int(j, "vocab_size", where);
  c.hidden_size = get_int(j, "hidden_size", where);
  c.num_hidden_layers = get_int(j, "num_hidden_layers", where);
  c.num_attention_heads = get_int(j, "num_attention_heads", where);
  c.intermediate_size = get_int(j, "intermediate_size", where);
  c.max_position_embeddings = get_int(j, "max_position_embeddings", where);
  c.type_vocab_size = get_int(j, "type_vocab_size", where);
  c.hidden_dropout_prob = get_double(j, "hidden_dropout_prob", where);
  c.attention_probs_dropout_prob = get_double(j, "attention_probs_dropout_prob", where);
  c.layer_norm_eps = get_double(j, "layer_norm_eps", where);
  c.initializer_range = get_double(j, "initializer_range", where);
  if (!j.at("hidden_act").is_string())
    fail(where, "key 'hidden_act' must be a string, found " + j.at("hidden_act").dump());
  c.hidden_act = j.at("hidden_act").get<std::string>();
  if (j.contains("model_type")) c.model_type = j.at("model_type").get<std::string>();
  if (c.model_type == "layoutlm") {
    if (!j.contains("max_2d_position_embeddings"))
      fail(where, "missing key 'max_2d_position_embeddings' (a LayoutLM config's box embeddings: 1024)");
    c.max_2d_position_embeddings = get_int(j, "max_2d_position_embeddings", where);
  }
  if (j.contains("architectures")) {
    const json& a = j.at("architectures");
    if (!a.is_array()) fail(where, "key 'architectures' must be a list of class names, found " + a.dump());
    for (const json& name : a) {
      if (!name.is_string()) fail(where, "key 'architectures' must hold class names, found " + name.dump());
      c.architectures.push_back(name.get<std::string>());
    }
  }
  if (j.contains("id2label")) {
    const json& m = j.at("id2label");
    if (!m.is_object()) fail(where, "key 'id2label' must map ids to label names, found " + m.dump());
    c.labels.assign(m.size(), "");
    for (const auto& [id, name] : m.items()) {
      size_t end = 0;
      int64_t k = -1;
      try {
        k = std::stoll(id, &end);
      } catch (const std::exception&) {
      }
      if (end != id.size() || id != std::to_string(k) || k < 0 || k >= static_cast<int64_t>(m.size()) ||
          !c.labels[static_cast<size_t>(k)].empty())
        fail(where,
             "'id2label' key \"" + id + "\" is not one of the ids 0.." + std::to_string(m.size() - 1) + " (each once)");
      if (!name.is_string() || name.get<std::string>().empty())
        fail(where, "'id2label' \"" + id + "\" must name a label, found " + name.dump());
      c.labels[static_cast<size_t>(k)] = name.get<std::string>();
    }
  }
  if (j.contains("joule_vocab_fnv1a64")) {
    const json& v = j.at("joule_vocab_fnv1a64");
    if (!v.is_string() || v.get<std::string>().size() != 16)
      fail(where, "'joule_vocab_fnv1a64' is " + v.dump() + "; it is the 16 hex digits of the vocabulary's checksum");
    c.vocab_fnv1a64 = v.get<std::string>();
  }
  c.validate(where);
  return c;
}

BertConfig BertConfig::from_json_file(const std::string& path) {
  std::string text;
  try {
    text = joule::read_text_file(path);
  } catch (const joule::IoError& e) {
    throw ModelConfigError(
        std::string(e.what()) + " (a model config: a preset name, a config.json or a model directory)",
        "give --model a preset (bert-tiny, bert-base, bert-large), a config.json, or a model directory "
        "holding config.json (a run's final/, or `joule export` of a checkpoint)");
  }
  return from_json_text(text, path);
}

std::string BertConfig::to_json_text() const {
  json j = {{"architectures", architectures.empty() ? std::vector<std::string>{"BertForPreTraining"} : architectures},
            {"model_type", model_type},
            {"vocab_size", vocab_size},
            {"hidden_size", hidden_size},
            {"num_hidden_layers", num_hidden_layers},
            {"num_attention_heads", num_attention_heads},
            {"intermediate_size", intermediate_size},
            {"max_position_embeddings", max_position_embeddings},
            {"type_vocab_size", type_vocab_size},
            {"hidden_dropout_prob", hidden_dropout_prob},
            {"attention_probs_dropout_prob", attention_probs_dropout_prob},
            {"layer_norm_eps", layer_norm_eps},
            {"initializer_range", initializer_range},
            {"hidden_act", hidden_act},
            {"position_embedding_type", "absolute"},
            {"pad_token_id", 0},
            {"torch_dtype", "float32"}};
  if (model_type == "layoutlm") j["max_2d_position_embeddings"] = max_2d_position_embeddings;
  if (!vocab_fnv1a64.empty()) j["joule_vocab_fnv1a64"] = vocab_fnv1a64;
  if (!labels.empty()) {
    for (size_t k = 0; k < labels.size(); ++k) {
      j["id2label"][std::to_string(k)] = labels[k];
      j["label2id"][labels[k]] = k;
    }
  }
  return j.dump(2) + "\n";
}

ParameterCounts parameter_counts(const BertConfig& c) {
  const int64_t h = c.hidden_size, i = c.intermediate_size;
  ParameterCounts p;
  p.embeddings = (c.vocab_size + c.max_position_embeddings + c.type_vocab_size) * h + 2 * h;
  if (c.model_type == "layoutlm") p.embeddings += 4 * c.max_2d_position_embeddings * h;  // x, y, h, w
  p.per_layer = 4 * (h * h + h)  // query, key, value, attention output dense
                + 2 * h          // attention output LayerNorm
                + (h * i + i)    // intermediate dense
                + (i * h + h)    // output dense
                + 2 * h;         // output LayerNorm
  p.encoder = c.num_hidden_layers * p.per_layer;
  p.pooler = h * h + h;
  p.mlm_head = (h * h + h) + 2 * h + c.vocab_size;  // transform dense, LayerNorm, output bias
  p.nsp_head = 2 * h + 2;
  return p;
}

bool is_matmul_weight(const std::string& hf_name) {
  const std::string suffix = ".weight";
  return hf_name.size() > suffix.size() &&
         hf_name.compare(hf_name.size() - suffix.size(), suffix.size(), suffix) == 0 &&
         hf_name.find("LayerNorm") == std::string::npos && hf_name.find("embeddings") == std::string::npos;
}

std::vector<std::pair<std::string, int64_t>> parameter_numels(const BertConfig& c) {
  const int64_t h = c.hidden_size, i = c.intermediate_size;
  std::vector<std::pair<std::string, int64_t>> p;
  auto linear = [&](const std::string& name, int64_t in, int64_t out) {
    p.emplace_back(name + ".weight", in * out);
    p.emplace_back(name + ".bias", out);
  };
  auto norm = [&](const std::string& name) {
    p.emplace_back(name + ".weight", h);
    p.emplace_back(name + ".bias", h);
  };
  p.emplace_back("bert.embeddings.word_embeddings.weight", c.vocab_size * h);
  p.emplace_back("bert.embeddings.position_embeddings.weight", c.max_position_embeddings * h);
  p.emplace_back("bert.embeddings.token_type_embeddings.weight", c.type_vocab_size * h);
  norm("bert.embeddings.LayerNorm");
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string layer = "bert.encoder.layer." + std::to_string(l);
    for (const char* x : {"query", "key", "value"}) linear(layer + ".attention.self." + x, h, h);
    linear(layer + ".attention.output.dense", h, h);
    norm(layer + ".attention.output.LayerNorm");
    linear(layer + ".intermediate.dense", h, i);
    linear(layer + ".output.dense", i, h);
    norm(layer + ".output.LayerNorm");
  }
  linear("bert.pooler.dense", h, h);
  p.emplace_back("cls.predictions.bias", c.vocab_size);
  linear("cls.predictions.transform.dense", h, h);
  norm("cls.predictions.transform.LayerNorm");
  linear("cls.seq_relationship", h, 2);
  return p;
}

BertConfig load_config(const std::string& arg, const std::string& presets_dir) {
  namespace fs = std::filesystem;
  fs::path p(arg);
  if (fs::is_directory(p)) return BertConfig::from_json_file((p / "config.json").string());
  if (fs::exists(p)) return BertConfig::from_json_file(p.string());
  fs::path preset = fs::path(presets_dir) / (arg + ".json");
  if (arg.find('/') == std::string::npos && fs::exists(preset)) return BertConfig::from_json_file(preset.string());
  std::string names;
  if (fs::is_directory(presets_dir))
    for (const auto& e : fs::directory_iterator(presets_dir))
      if (e.path().extension() == ".json") names += (names.empty() ? "" : ", ") + e.path().stem().string();
  throw ModelConfigError(arg + ": no such model config file or directory, and not a preset (presets in " + presets_dir +
                         ": " + (names.empty() ? "none found" : names) + ")");
}

}  // namespace joule::models
