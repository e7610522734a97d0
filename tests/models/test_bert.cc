#include <gtest/gtest.h>

#include "models/bert.h"
#include "models/dropout.h"
#include "test_util.h"

using joule::models::BertConfig;
using joule::models::BertForPreTraining;
using joule::models::ForwardOptions;
using joule::models::MlmHeadMode;
using joule::models::PretrainingBatch;

namespace {

BertConfig tiny(double dropout = 0.0) { return joule::test::small_bert(211, 48, 3, 96, 64, dropout); }

PretrainingBatch batch_with_unused_slots(const BertConfig& c) {
  PretrainingBatch b = joule::models::synthetic_batch(c, 3, 24, 6, 11);
  // Row 1 uses 4 of its 6 slots, row 2 uses 2; padding at the end of row 2.
  b.masked_positions[1].narrow(0, 4, 2).zero_();
  b.masked_ids[1].narrow(0, 4, 2).zero_();
  b.masked_positions[2].narrow(0, 2, 4).zero_();
  b.masked_ids[2].narrow(0, 2, 4).zero_();
  b.attention_mask[2].narrow(0, 20, 4).zero_();
  return b;
}

std::vector<torch::Tensor> grads_of(BertForPreTraining& m, const PretrainingBatch& b, MlmHeadMode mode, double* loss) {
  m->zero_grad();
  ForwardOptions o;
  o.mlm_head = mode;
  auto out = m->forward(b, o);
  out.loss.backward();
  *loss = out.loss.item<double>();
  std::vector<torch::Tensor> g;
  for (auto& p : m->parameters()) g.push_back(p.grad().clone());
  return g;
}

}  // namespace

TEST(Bert, ForwardShapesAndLossComposition) {
  BertConfig c = tiny();
  BertForPreTraining m(c, 1);
  PretrainingBatch b = batch_with_unused_slots(c);
  auto out = m->forward(b);
  EXPECT_EQ(out.loss.dim(), 0);
  EXPECT_EQ(out.mlm_predictions, 6 + 4 + 2);
  EXPECT_TRUE(std::isfinite(out.loss.item<double>()));
  EXPECT_NEAR(out.loss.item<double>(), out.mlm_loss.item<double>() + out.nsp_loss.item<double>(), 1e-6);
  // Untrained: MLM loss near log(vocab), NSP near log(2).
  EXPECT_NEAR(out.mlm_loss.item<double>(), std::log(211.0), 0.5);
  EXPECT_NEAR(out.nsp_loss.item<double>(), std::log(2.0), 0.2);
  EXPECT_GE(out.mlm_correct.item<int64_t>(), 0);
  EXPECT_LE(out.mlm_correct.item<int64_t>(), out.mlm_predictions);
  EXPECT_LE(out.nsp_correct.item<int64_t>(), 3);
}

TEST(Bert, UnusedPredictionSlotsDoNotAffectTheLoss) {
  BertConfig c = tiny();
  BertForPreTraining m(c, 2);
  m->eval();
  PretrainingBatch b = batch_with_unused_slots(c);
  const double base = m->forward(b).mlm_loss.item<double>();

  // Labels in unused slots are ignored.
  PretrainingBatch changed = b;
  changed.masked_ids = b.masked_ids.clone();
  changed.masked_ids[1][5] = 17;
  changed.masked_ids[2][3] = 99;
  EXPECT_EQ(m->forward(changed).mlm_loss.item<double>(), base);

  // Anything after a row's first 0 position is ignored (NVIDIA's loader stops there).
  changed.masked_positions = b.masked_positions.clone();
  changed.masked_positions[2][4] = 7;
  EXPECT_EQ(m->forward(changed).mlm_loss.item<double>(), base);

  // A used slot's label does matter (the test above can fail).
  changed.masked_ids[0][0] = (b.masked_ids[0][0].item<int64_t>() + 1) % c.vocab_size;
  EXPECT_NE(m->forward(changed).mlm_loss.item<double>(), base);
}

TEST(Bert, PaddedTokensDoNotAffectRealPositions) {
  BertConfig c = tiny();
  BertForPreTraining m(c, 3);
  m->eval();
  PretrainingBatch b = batch_with_unused_slots(c);
  const double base = m->forward(b).loss.item<double>();
  PretrainingBatch changed = b;
  changed.input_ids = b.input_ids.clone();
  changed.input_ids[2].narrow(0, 20, 4).fill_(150);  // under attention_mask == 0
  EXPECT_NEAR(m->forward(changed).loss.item<double>(), base, 1e-6);
}

TEST(Bert, MaskedOnlyHeadEqualsFullSequenceHead) {
  BertConfig c = tiny();
  BertForPreTraining m(c, 4);
  PretrainingBatch b = batch_with_unused_slots(c);
  double loss_masked = 0, loss_full = 0;
  auto g_masked = grads_of(m, b, MlmHeadMode::kMaskedOnly, &loss_masked);
  auto g_full = grads_of(m, b, MlmHeadMode::kFullSequence, &loss_full);
  EXPECT_NEAR(loss_masked, loss_full, 1e-5 * std::abs(loss_full));
  ASSERT_EQ(g_masked.size(), g_full.size());
  size_t i = 0;
  for (const auto& [name, p] : m->hf_named_parameters()) {
    EXPECT_TRUE(torch::allclose(g_masked[i], g_full[i], 1e-4, 1e-6)) << name;
    EXPECT_GT(g_full[i].abs().sum().item<double>(), 0.0) << name << " gets no gradient";
    ++i;
  }
}

TEST(Bert, InitializationFollowsHuggingFaceAndIsSeeded) {
  BertConfig c = tiny();
  c.vocab_size = 2000;
  BertForPreTraining a(c, 7), b(c, 7), d(c, 8);
  auto pa = a->hf_named_parameters(), pb = b->hf_named_parameters(), pd = d->hf_named_parameters();
  bool any_differs = false;
  for (size_t i = 0; i < pa.size(); ++i) {
    const std::string& name = pa[i].first;
    EXPECT_TRUE(torch::equal(pa[i].second, pb[i].second)) << name;
    any_differs |= !torch::equal(pa[i].second, pd[i].second);
    if (name.find("LayerNorm.weight") != std::string::npos) {
      EXPECT_TRUE(torch::all(pa[i].second == 1).item<bool>()) << name;
    } else if (pa[i].second.dim() == 1) {
      EXPECT_TRUE(torch::all(pa[i].second == 0).item<bool>()) << name;
    }
  }
  EXPECT_TRUE(any_differs);
  torch::Tensor words = pa[0].second;
  ASSERT_EQ(pa[0].first, "bert.embeddings.word_embeddings.weight");
  EXPECT_TRUE(torch::all(words[0] == 0).item<bool>());  // [PAD] row
  EXPECT_NEAR(words.narrow(0, 1, 1999).std().item<double>(), c.initializer_range, 0.002);
}

TEST(Bert, DropoutIsActiveOnlyInTraining) {
  BertConfig c = tiny(0.1);
  BertForPreTraining m(c, 5);
  PretrainingBatch b = batch_with_unused_slots(c);
  m->train();
  torch::manual_seed(1);
  double t1 = m->forward(b).loss.item<double>();
  double t2 = m->forward(b).loss.item<double>();
  torch::manual_seed(1);
  double t3 = m->forward(b).loss.item<double>();
  EXPECT_NE(t1, t2);
  EXPECT_EQ(t1, t3);  // dropout draws from torch's seeded generator
  m->eval();
  EXPECT_EQ(m->forward(b).loss.item<double>(), m->forward(b).loss.item<double>());
}

// A run's batches key dropout by their rows' stream indices: a row drops the same elements whichever micro-batch holds
// it (so whatever the rank layout), and torch's generator does not matter.
TEST(Dropout, ARunsRowDropsTheSameWayInAnyMicroBatch) {
  BertConfig c = tiny(0.1);
  BertForPreTraining m(c, 5);
  m->train();
  PretrainingBatch whole = joule::models::synthetic_batch(c, 4, 24, 6, 11);
  auto rows = [&](int64_t first, int64_t count, uint64_t key) {
    PretrainingBatch b{whole.input_ids.narrow(0, first, count),
                       whole.token_type_ids.narrow(0, first, count),
                       whole.attention_mask.narrow(0, first, count),
                       whole.masked_positions.narrow(0, first, count),
                       whole.masked_ids.narrow(0, first, count),
                       whole.next_sentence_labels.narrow(0, first, count),
                       torch::Tensor(),
                       0,
                       joule::data::BatchRows{9, key, {}}};
    return b;
  };
  // The batch's summed losses (what the trainer sums over micro-batches and ranks).
  auto sums = [&](const PretrainingBatch& b) {
    const auto out = m->forward(b);
    return std::pair{out.mlm_loss.item<double>() * static_cast<double>(out.mlm_predictions),
                     out.nsp_loss.item<double>() * static_cast<double>(b.input_ids.size(0))};
  };
  torch::manual_seed(1);
  const auto all = sums(rows(0, 4, 100));
  torch::manual_seed(2);  // another generator state: the same masks
  const auto again = sums(rows(0, 4, 100));
  EXPECT_EQ(all, again);
  const auto a = sums(rows(0, 2, 100)), b = sums(rows(2, 2, 102));
  EXPECT_NEAR(a.first + b.first, all.first, 1e-6 * all.first);
  EXPECT_NEAR(a.second + b.second, all.second, 1e-6 * all.second);
  // The same rows keyed as other rows of the run drop other elements (at initialization dropout moves the loss by
  // about 1e-3 of itself).
  const auto other = sums(rows(2, 2, 100));
  EXPECT_GT(std::abs(other.first - b.first), 1e-4 * b.first);
  // Outside a run (no rows), torch's generator draws: another state, another loss.
  PretrainingBatch unkeyed = rows(0, 4, 100);
  unkeyed.rows.reset();
  torch::manual_seed(1);
  const auto g1 = sums(unkeyed);
  torch::manual_seed(2);
  EXPECT_NE(sums(unkeyed), g1);
}

TEST(Dropout, KeepsOneMinusPScaledAndBackpropagatesThroughTheSameMask) {
  const int64_t n = 1 << 20;
  torch::manual_seed(3);
  const torch::Tensor x = torch::rand({n / 1024, 1024}).add_(0.5).set_requires_grad(true);
  const torch::Tensor y = joule::models::train_dropout(x, 0.1);
  const torch::Tensor kept = y != 0;
  // Binomial(2^20, 0.9): the standard deviation of the kept fraction is 3e-4.
  EXPECT_NEAR(kept.to(torch::kDouble).mean().item<double>(), 0.9, 2e-3);
  EXPECT_TRUE(torch::allclose(y.masked_select(kept), x.masked_select(kept) / 0.9f, 1e-6, 0));
  // The two draws taken from one hash are independent: both kept in about 0.81 of adjacent pairs.
  const torch::Tensor pairs = kept.view({-1, 2});
  EXPECT_NEAR((pairs.select(1, 0) & pairs.select(1, 1)).to(torch::kDouble).mean().item<double>(), 0.81, 3e-3);
  const torch::Tensor w = torch::randn({n / 1024, 1024});
  (y * w).sum().backward();
  EXPECT_TRUE(torch::allclose(x.grad(), kept.to(torch::kFloat) * w / 0.9f, 1e-6, 1e-7));
}

TEST(Dropout, SeededByTorchAndTheSameForAnyThreadCount) {
  const torch::Tensor x = torch::ones({300, 1000});
  const int threads = torch::get_num_threads();
  torch::set_num_threads(1);
  torch::manual_seed(7);
  const torch::Tensor a = joule::models::train_dropout(x, 0.25), a_next = joule::models::train_dropout(x, 0.25);
  torch::set_num_threads(2);
  torch::manual_seed(7);
  const torch::Tensor b = joule::models::train_dropout(x, 0.25);
  torch::set_num_threads(threads);
  EXPECT_TRUE(torch::equal(a, b));
  EXPECT_FALSE(torch::equal(a, a_next));  // each call draws a new seed
  EXPECT_TRUE(torch::equal(joule::models::train_dropout(x, 0.0), x));
  EXPECT_NEAR((a == 0).to(torch::kDouble).mean().item<double>(), 0.25, 5e-3);
}

TEST(Bert, NoDecayParametersAreBiasesAndLayerNorms) {
  EXPECT_TRUE(joule::models::is_no_decay_parameter("bert.encoder.layer.0.attention.self.query.bias"));
  EXPECT_TRUE(joule::models::is_no_decay_parameter("bert.embeddings.LayerNorm.weight"));
  EXPECT_TRUE(joule::models::is_no_decay_parameter("cls.predictions.bias"));
  EXPECT_FALSE(joule::models::is_no_decay_parameter("bert.encoder.layer.0.attention.self.query.weight"));
  EXPECT_FALSE(joule::models::is_no_decay_parameter("bert.embeddings.word_embeddings.weight"));
}

TEST(Bert, SequenceLongerThanPositionsIsAnError) {
  BertConfig c = tiny();
  BertForPreTraining m(c, 1);
  PretrainingBatch b = joule::models::synthetic_batch(c, 1, 65, 4, 1);
  EXPECT_THROW(m->forward(b), c10::Error);
}
