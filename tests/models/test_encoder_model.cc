// The inference models on the shared encoder: a pretraining directory's encoder inside a classifier (the same hidden
// states as BertForPreTraining's, the head initialized and said), LayoutLM's box embeddings, the config keys they
// read and the errors that name what is wrong. Parity with transformers itself: tools/check/hf_parity.py.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <set>
#include <string>

#include "launch/util/error.h"
#include "models/bert.h"
#include "models/bf16_linear.h"
#include "models/encoder_model.h"
#include "models/flops.h"
#include "models/model_dir.h"
#include "test_util.h"

namespace fs = std::filesystem;
using joule::models::BertConfig;
using joule::models::EncoderInput;
using joule::models::EncoderModel;

namespace {

BertConfig tiny() { return joule::test::small_bert(150, 32, 4, 64, 40, 0.1); }

BertConfig tiny_layout() {
  BertConfig c = tiny();
  c.model_type = "layoutlm";
  c.max_2d_position_embeddings = 1024;
  return c;
}

EncoderInput input_for(const BertConfig& c, uint64_t seed) {
  const auto b = joule::models::synthetic_batch(c, 2, 12, 3, seed);
  EncoderInput in{b.input_ids, b.token_type_ids, b.attention_mask, {}, {}, {}};
  in.attention_mask[1].narrow(0, 9, 3).zero_();
  auto gen = at::detail::createCPUGenerator(seed);
  torch::Tensor x0 = torch::randint(0, 900, {2, 12}, gen, torch::kInt64);
  torch::Tensor y0 = torch::randint(0, 900, {2, 12}, gen, torch::kInt64);
  in.bbox = torch::stack({x0, y0, x0 + 50, y0 + 20}, -1);
  return in;
}

std::string temp_dir(const std::string& name) {
  const fs::path d = fs::temp_directory_path() / ("joule_encoder_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  return d.string();
}

}  // namespace

TEST(EncoderModel, APretrainingDirectoryIsTheEncoderOfAClassifier) {
  const BertConfig c = tiny();
  joule::models::BertForPreTraining pre(c, 3);
  const std::string dir = temp_dir("pretraining");
  joule::models::save_model_dir(pre, dir);
  // A BertForPreTraining directory names no inference class: the error says to choose one.
  try {
    joule::models::load_encoder_model(dir);
    FAIL() << "a pretraining directory loaded without an architecture";
  } catch (const joule::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("name the architecture"), std::string::npos) << e.what();
  }
  auto loaded = joule::models::load_encoder_model(dir, "BertForSequenceClassification", 3);
  ASSERT_EQ(loaded.loading_notes.size(), 2u);
  EXPECT_NE(loaded.loading_notes[0].find("has no classifier.bias, classifier.weight: initialized"), std::string::npos)
      << loaded.loading_notes[0];
  EXPECT_NE(loaded.loading_notes[1].find("unused by a BertForSequenceClassification (the first: cls."),
            std::string::npos)
      << loaded.loading_notes[1];
  const EncoderInput in = input_for(c, 5);
  const auto out = loaded.model.forward(in);
  EXPECT_EQ(out.logits.sizes(), (std::vector<int64_t>{2, 3}));
  // The encoder is the pretraining model's: its hidden states, as BertForPreTraining computes them in eval.
  joule::models::BertModel encoder(c, true);
  {
    torch::NoGradGuard no_grad;
    auto named = pre->named_parameters();
    for (auto& item : encoder->named_parameters()) item.value().copy_(named["bert." + item.key()]);
  }
  encoder->eval();
  torch::NoGradGuard no_grad;
  const joule::models::PrecisionOps fp32;
  EXPECT_TRUE(torch::equal(encoder->encode(in, fp32), out.hidden));
  // A token classifier has no pooler: the directory's is left unread too.
  auto token = joule::models::load_encoder_model(dir, "BertForTokenClassification", 5);
  EXPECT_EQ(token.model.forward(in).logits.sizes(), (std::vector<int64_t>{2, 12, 5}));
  EXPECT_FALSE(token.model.forward(in).pooled.defined());
  fs::remove_all(dir);
}

TEST(EncoderModel, ForeignPrefixesHalfHeadsAndOutOfRangeIdsAreRefused) {
  const BertConfig c = tiny();
  EncoderModel m(c, joule::models::architecture_named("BertForSequenceClassification"), 2, 4);
  const std::string dir = temp_dir("refusals");
  joule::models::save_encoder_model(m, dir);
  auto written = BertConfig::from_json_file(dir + "/config.json");
  EXPECT_EQ(written.architectures, std::vector<std::string>{"BertForSequenceClassification"});
  // Its weights under another model's prefix, and without the classifier's bias.
  std::vector<std::pair<std::string, torch::Tensor>> renamed, half;
  for (const auto& [name, p] : m.hf_named_parameters()) {
    renamed.emplace_back(name.rfind("bert.", 0) == 0 ? "roberta." + name.substr(5) : name, p);
    if (name != "classifier.bias") half.emplace_back(name, p);
  }
  joule::models::write_weights(renamed, dir + "/model.safetensors");
  EXPECT_THROW(joule::models::load_encoder_model(dir), joule::Error);
  joule::models::write_weights(half, dir + "/model.safetensors");
  try {
    joule::models::load_encoder_model(dir);
    ADD_FAILURE() << "half a classifier loaded";
  } catch (const joule::Error& e) {
    EXPECT_NE(std::string(e.what()).find("has 'classifier.weight' but not 'classifier.bias'"), std::string::npos)
        << e.what();
  }
  // A pretraining directory written from a classifier's config still says BertForPreTraining.
  BertConfig labelled = c;
  labelled.architectures = {"BertForSequenceClassification"};
  labelled.labels = {"a", "b"};
  joule::models::save_model_dir(joule::models::BertForPreTraining(labelled), dir);
  written = BertConfig::from_json_file(dir + "/config.json");
  EXPECT_EQ(written.architectures, std::vector<std::string>{"BertForPreTraining"});
  EXPECT_TRUE(written.labels.empty());
  // Ids outside the tables are named, not an index error.
  EncoderInput in = input_for(c, 3);
  in.input_ids[0][1] = c.vocab_size;
  try {
    m.forward(in);
    ADD_FAILURE() << "an id past the vocabulary ran";
  } catch (const joule::UsageError& e) {
    EXPECT_NE(std::string(e.what()).find("input_ids holds 150, outside the model's vocabulary"), std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

TEST(EncoderModel, LayoutLMAddsTheBoxesEmbeddingsAndNeedsThem) {
  const BertConfig c = tiny_layout();
  EncoderModel m(c, joule::models::architecture_named("LayoutLMForTokenClassification"), 4, 1);
  std::set<std::string> names;
  for (const auto& [name, p] : m.hf_named_parameters()) names.insert(name);
  for (const char* n :
       {"layoutlm.embeddings.x_position_embeddings.weight", "layoutlm.embeddings.h_position_embeddings.weight",
        "layoutlm.pooler.dense.weight", "classifier.weight"})
    EXPECT_TRUE(names.count(n)) << n;
  EncoderInput in = input_for(c, 9);
  const torch::Tensor a = m.forward(in).logits;
  in.bbox.select(2, 2).add_(7);  // wider boxes: other x1 and width embeddings
  EXPECT_FALSE(torch::allclose(a, m.forward(in).logits));
  in.bbox = torch::Tensor();
  EXPECT_THROW(m.forward(in), c10::Error);
  // A BERT class on a LayoutLM config is refused naming both.
  try {
    EncoderModel wrong(c, joule::models::architecture_named("BertModel"), 2);
    FAIL();
  } catch (const joule::models::ModelConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("a BertModel needs a \"bert\" config"), std::string::npos) << e.what();
  }
  EXPECT_THROW(joule::models::architecture_named("RobertaModel"), joule::UsageError);
  // Pretraining is BERT's only.
  EXPECT_THROW({ joule::models::BertForPreTraining pretraining(c); }, joule::models::ModelConfigError);
}

TEST(EncoderModel, ConfigReadsLayoutAndLabels) {
  BertConfig c = tiny_layout();
  c.labels = {"O", "B-KEY", "I-KEY"};
  c.architectures = {"LayoutLMForTokenClassification"};
  const BertConfig back = BertConfig::from_json_text(c.to_json_text(), "written");
  EXPECT_EQ(back.model_type, "layoutlm");
  EXPECT_EQ(back.max_2d_position_embeddings, 1024);
  EXPECT_EQ(back.labels, c.labels);
  EXPECT_EQ(back.architectures, c.architectures);
  auto refused = [](std::string text, const std::string& what) {
    try {
      BertConfig::from_json_text(text, "c.json");
      ADD_FAILURE() << "accepted: " << what;
    } catch (const joule::models::ModelConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  std::string text = c.to_json_text();
  const auto cut = [&](const std::string& from, const std::string& to) {
    std::string t = text;
    t.replace(t.find(from), from.size(), to);
    return t;
  };
  refused(cut("\"max_2d_position_embeddings\": 1024,", ""), "missing key 'max_2d_position_embeddings'");
  refused(cut("\"1\": \"B-KEY\"", "\"one\": \"B-KEY\""), "'id2label' key \"one\" is not one of the ids 0..2");
  refused(cut("\"model_type\": \"layoutlm\"", "\"model_type\": \"roberta\""), "joule reads \"bert\" and \"layoutlm\"");
  refused(cut("\"1\": \"B-KEY\"", "\"01\": \"B-KEY\""), "'id2label' key \"01\" is not one of the ids 0..2");
  refused(cut("\"max_2d_position_embeddings\": 1024", "\"max_2d_position_embeddings\": 1000"),
          "'max_2d_position_embeddings' must be in [1001, 65536]");
  // A BERT config with LayoutLM's key is a mistake, named.
  BertConfig bert = tiny();
  std::string b = bert.to_json_text();
  b.insert(1, "\"max_2d_position_embeddings\": 1024,");
  refused(b, "unknown key 'max_2d_position_embeddings'");
}

// In bf16 the matmul weights and biases are cast once, when the precision is set: held in bf16 from then on (the
// embeddings and LayerNorm stay fp32) and packed for oneDNN; the logits stay close to fp32's, repeat exactly, and fp32
// is refused after.
TEST(EncoderModel, Bf16HoldsTheMatmulWeightsOnce) {
  const BertConfig c = tiny_layout();
  const auto& a = joule::models::architecture_named("LayoutLMForTokenClassification");
  EncoderModel fp32(c, a, 3, 7), bf16(c, a, 3, 7);
  const EncoderInput in = input_for(c, 5);
  const torch::Tensor reference = fp32.forward(in).logits;
  bf16.set_precision(joule::models::Precision::kBf16);
  std::set<std::string> held;
  for (const auto& [name, p] : bf16.hf_named_parameters()) {
    const bool matmul = name.find("embeddings.") == std::string::npos && name.find("LayerNorm") == std::string::npos;
    EXPECT_EQ(p.scalar_type(), matmul ? torch::kBFloat16 : torch::kFloat) << name;
    if (p.scalar_type() == torch::kBFloat16) held.insert(name);
  }
  for (const char* name :
       {"layoutlm.encoder.layer.0.attention.self.query.weight", "layoutlm.encoder.layer.0.attention.self.query.bias",
        "classifier.weight", "classifier.bias"})
    EXPECT_TRUE(held.count(name)) << name;
  const torch::Tensor first = bf16.forward(in).logits, second = bf16.forward(in).logits;
  EXPECT_TRUE(torch::equal(first, second));
  EXPECT_EQ(first.scalar_type(), torch::kFloat);
  EXPECT_LT((first - reference).abs().max().item<double>(), 0.05 * reference.abs().max().item<double>() + 0.02);
  // Every 2-D matmul weight packed for oneDNN once, where joule's bf16 GEMMs run (none held in fp32; none packed where
  // every bf16 GEMM is LibTorch's).
  EXPECT_EQ(fp32.packed_weights(), nullptr);
  if (!joule::models::bf16_gemms_available()) {
    EXPECT_EQ(bf16.packed_weights(), nullptr);
  } else {
    ASSERT_NE(bf16.packed_weights(), nullptr);
    // The feed-forward blocks' weights as pairs, in chunks (bf16_feed_forward); every other one alone.
    size_t weights = 0;
    const auto named = bf16.hf_named_parameters();
    const auto param = [&](const std::string& name) {
      for (const auto& [n, p] : named)
        if (n == name) return p;
      ADD_FAILURE() << "no " << name;
      return torch::Tensor();
    };
    for (const auto& [name, p] : named) {
      if (p.scalar_type() != torch::kBFloat16 || p.dim() != 2) continue;
      ++weights;
      const size_t at = name.find(".intermediate.dense.weight");
      const bool down =
          name.find(".output.dense.weight") != std::string::npos && name.find("attention") == std::string::npos;
      if (at != std::string::npos) {
        EXPECT_NE(bf16.packed_weights()->find_feed_forward(p, param(name.substr(0, at) + ".output.dense.weight")),
                  nullptr)
            << name;
      } else if (!down) {
        EXPECT_NE(bf16.packed_weights()->find(p), nullptr) << name;
      }
      if (at != std::string::npos || down) {
        EXPECT_EQ(bf16.packed_weights()->find(p), nullptr) << name;
      }
    }
    EXPECT_EQ(bf16.packed_weights()->size(), weights);
  }
  EXPECT_THROW(bf16.set_precision(joule::models::Precision::kFp32), joule::InternalError);
  bf16.set_precision(joule::models::Precision::kBf16);  // the same precision again: nothing to cast
  EXPECT_TRUE(torch::equal(bf16.forward(in).logits, first));
}

// Outputs::kLogits: a sequence classifier's last layer computes the [CLS] position only (its keys and values from
// every position): the same logits and first-position state as the whole forward, in fp32 and bf16, and the FLOP
// count says what was left out; a token classifier computes everything either way.
TEST(EncoderModel, LogitsOnlyComputesTheLastLayerAtTheFirstPosition) {
  using joule::models::Outputs;
  const BertConfig c = tiny();
  EncoderInput in = input_for(c, 9);
  for (const auto precision : {joule::models::Precision::kFp32, joule::models::Precision::kBf16}) {
    EncoderModel m(c, joule::models::architecture_named("BertForSequenceClassification"), 3, 2);
    m.set_precision(precision);
    ASSERT_TRUE(m.first_position_only(Outputs::kLogits));
    EXPECT_FALSE(m.first_position_only(Outputs::kAll));
    const auto all = m.forward(in), first = m.forward(in, Outputs::kLogits);
    EXPECT_EQ(all.hidden.sizes(), (std::vector<int64_t>{2, 12, 32}));
    EXPECT_EQ(first.hidden.sizes(), (std::vector<int64_t>{2, 1, 32}));
    const double tol = precision == joule::models::Precision::kFp32 ? 1e-5 : 2e-2;
    EXPECT_TRUE(torch::allclose(first.logits, all.logits, tol, tol)) << first.logits << all.logits;
    EXPECT_TRUE(torch::allclose(first.pooled, all.pooled, tol, tol));
    EXPECT_TRUE(torch::allclose(first.hidden, all.hidden.narrow(1, 0, 1), tol, tol));
    // One sequence (the padded one): one row through the last layer.
    const EncoderInput one{
        in.input_ids.narrow(0, 1, 1), in.token_type_ids.narrow(0, 1, 1), in.attention_mask.narrow(0, 1, 1), {}, {}, {}};
    EXPECT_TRUE(torch::allclose(m.forward(one, Outputs::kLogits).logits, m.forward(one).logits, tol, tol));
  }
  EncoderModel token(c, joule::models::architecture_named("BertForTokenClassification"), 3, 2);
  EXPECT_FALSE(token.first_position_only(Outputs::kLogits));
  EXPECT_TRUE(torch::equal(token.forward(in, Outputs::kLogits).logits, token.forward(in).logits));
  // bert-base at 128 tokens: the last layer's query, attention output, attention and feed-forward GEMMs run on one
  // row of the 128, its key and value projections on all.
  const BertConfig base;  // the defaults: bert-base
  const double whole = joule::models::total_flops(joule::models::inference_gemms(base, 1, 128, 2, false));
  const double pruned = joule::models::total_flops(joule::models::inference_gemms(base, 1, 128, 2, false, true));
  const double h = 768, layer_rows = 2.0 * (4 * h * h + 2 * h * 3072) + 2.0 * 2 * 128 * 64 * 12;  // per position
  const double left_out = 127 * (layer_rows - 2.0 * 2 * h * h);  // all but the key and value projections
  EXPECT_NEAR(whole - pruned, left_out, 1e-6 * whole);
}
