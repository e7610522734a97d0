#include <gtest/gtest.h>

#include <string>

#include "models/bert.h"
#include "models/bert_config.h"
#include "test_util.h"

using joule::models::BertConfig;
using joule::models::ModelConfigError;

namespace {

// A preset from configs/models, as `--config bert-large` resolves it.
BertConfig preset(const std::string& name) {
  return joule::models::load_config(name, std::string(JOULE_CONFIG_DIR) + "/models");
}

int64_t instantiated_count(const BertConfig& c) {
  joule::models::BertForPreTraining model(c);
  int64_t n = 0;
  for (const auto& p : model->parameters()) n += p.numel();
  return n;
}

std::string error_of(const std::string& json) {
  try {
    BertConfig::from_json_text(json, "my/config.json");
  } catch (const ModelConfigError& e) {
    return e.what();
  }
  return "";
}

std::string base_json(const std::string& extra = "", const std::string& drop = "") {
  std::string keys[][2] = {
      {"vocab_size", "100"},        {"hidden_size", "64"},          {"num_hidden_layers", "2"},
      {"num_attention_heads", "4"}, {"intermediate_size", "128"},   {"max_position_embeddings", "32"},
      {"type_vocab_size", "2"},     {"hidden_dropout_prob", "0.1"}, {"attention_probs_dropout_prob", "0.1"},
      {"layer_norm_eps", "1e-12"},  {"initializer_range", "0.02"},  {"hidden_act", "\"gelu\""}};
  std::string s = "{";
  for (auto& kv : keys) {
    if (kv[0] == drop) continue;
    s += "\"" + kv[0] + "\": " + kv[1] + ",";
  }
  s += extra;
  if (s.back() == ',') s.pop_back();
  return s + "}";
}

}  // namespace

// Known totals for HuggingFace's BertForPreTraining (decoder tied, counted once).
TEST(BertConfig, PresetParameterCountsMatchClosedFormAndModel) {
  struct Case {
    const char* preset;
    int64_t expected;  // 0: no published figure, closed form and model must still agree
  } cases[] = {{"bert-large", 336226108}, {"bert-base", 110106428}, {"bert-tiny", 0}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.preset);
    BertConfig config = preset(c.preset);
    const int64_t closed = joule::models::parameter_counts(config).total();
    if (c.expected) {
      EXPECT_EQ(closed, c.expected);
    }
    EXPECT_EQ(instantiated_count(config), closed);
  }
}

TEST(BertConfig, PresetsHaveThePublishedShapes) {
  BertConfig large = preset("bert-large");
  EXPECT_EQ(large.num_hidden_layers, 24);
  EXPECT_EQ(large.hidden_size, 1024);
  EXPECT_EQ(large.num_attention_heads, 16);
  EXPECT_EQ(large.intermediate_size, 4096);
  EXPECT_EQ(large.vocab_size, 30522);
  EXPECT_EQ(large.max_position_embeddings, 512);
  BertConfig tiny = preset("bert-tiny");
  EXPECT_EQ(tiny.num_hidden_layers, 2);
  EXPECT_EQ(tiny.hidden_size, 128);
  EXPECT_EQ(tiny.num_attention_heads, 2);
}

TEST(BertConfig, RoundTripsThroughJson) {
  BertConfig c = BertConfig::from_json_text(base_json(), "x");
  BertConfig d = BertConfig::from_json_text(c.to_json_text(), "y");
  EXPECT_EQ(d.hidden_size, 64);
  EXPECT_EQ(d.num_attention_heads, 4);
  EXPECT_DOUBLE_EQ(d.layer_norm_eps, 1e-12);
  EXPECT_EQ(d.to_json_text(), c.to_json_text());
}

TEST(BertConfig, AcceptsHuggingFaceBookkeepingKeys) {
  EXPECT_EQ(error_of(base_json("\"model_type\": \"bert\", \"architectures\": [\"BertForMaskedLM\"], "
                               "\"transformers_version\": \"4.40.0\", \"pad_token_id\": 0, "
                               "\"position_embedding_type\": \"absolute\", \"use_cache\": true")),
            "");
}

TEST(BertConfig, ErrorsNameFileKeyAndValue) {
  std::string e = error_of(base_json("\"hiden_size\": 64"));
  EXPECT_NE(e.find("my/config.json"), std::string::npos) << e;
  EXPECT_NE(e.find("unknown key 'hiden_size'"), std::string::npos) << e;
  EXPECT_NE(e.find("hidden_size"), std::string::npos) << e;  // lists the valid keys

  e = error_of(base_json("", "intermediate_size"));
  EXPECT_NE(e.find("missing key 'intermediate_size'"), std::string::npos) << e;

  e = error_of(base_json("", "hidden_size") + "");
  EXPECT_NE(e.find("missing key 'hidden_size'"), std::string::npos) << e;

  std::string bad_type = base_json();
  bad_type.replace(bad_type.find("\"vocab_size\": 100"), 17, "\"vocab_size\": \"100\"");
  e = error_of(bad_type);
  EXPECT_NE(e.find("'vocab_size' must be an integer"), std::string::npos) << e;

  std::string indivisible = base_json();
  indivisible.replace(indivisible.find("\"num_attention_heads\": 4"), 24, "\"num_attention_heads\": 5");
  e = error_of(indivisible);
  EXPECT_NE(e.find("hidden_size 64 is not divisible by num_attention_heads 5"), std::string::npos) << e;

  std::string relu = base_json();
  relu.replace(relu.find("\"gelu\""), 6, "\"relu\"");
  EXPECT_NE(error_of(relu).find("'hidden_act' is \"relu\""), std::string::npos);

  EXPECT_NE(error_of(base_json("\"model_type\": \"roberta\"")).find("'model_type'"), std::string::npos);
  EXPECT_NE(error_of(base_json("\"position_embedding_type\": \"relative_key\"")).find("position_embedding_type"),
            std::string::npos);
  EXPECT_NE(error_of("{not json").find("not valid JSON"), std::string::npos);
  EXPECT_NE(error_of("[1,2]").find("JSON object"), std::string::npos);

  std::string negative = base_json();
  negative.replace(negative.find("\"num_hidden_layers\": 2"), 22, "\"num_hidden_layers\": 0");
  EXPECT_NE(error_of(negative).find("'num_hidden_layers' must be in [1, 4096] (BERT-Large: 24), found 0"),
            std::string::npos)
      << error_of(negative);

  // A size past any BERT is refused naming the key before anything is allocated (it was an allocator error).
  std::string huge = base_json();
  huge.replace(huge.find("\"num_hidden_layers\": 2"), 22, "\"num_hidden_layers\": 99999999999");
  EXPECT_NE(error_of(huge).find("'num_hidden_layers' must be in [1, 4096] (BERT-Large: 24), found 99999999999"),
            std::string::npos)
      << error_of(huge);
  // Each key in range, the product not: more parameters than any one node holds the training state of.
  std::string wide = base_json();
  wide.replace(wide.find("\"num_hidden_layers\": 2"), 22, "\"num_hidden_layers\": 4096");
  wide.replace(wide.find("\"intermediate_size\": 128"), 24, "\"intermediate_size\": 262144");
  EXPECT_NE(error_of(wide).find("parameters (more than 2^36"), std::string::npos) << error_of(wide);
}

TEST(BertConfig, UnknownPresetListsTheAvailableOnes) {
  try {
    preset("bert-huge");
    FAIL() << "expected an error";
  } catch (const ModelConfigError& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("bert-huge"), std::string::npos) << m;
    EXPECT_NE(m.find("bert-large"), std::string::npos) << m;
  }
}

TEST(BertConfig, MissingFileIsAClearError) {
  joule::test::TempDir dir;
  EXPECT_THROW(BertConfig::from_json_file(dir.file("nope.json")), ModelConfigError);
  try {
    BertConfig::from_json_file(dir.file("nope.json"));
  } catch (const ModelConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("nope.json: no such file"), std::string::npos) << e.what();
  }
}
