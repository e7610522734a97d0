// Sizing an inference fleet (trainer/sim/inference_sizing.h): FLOP scaling of published figures, the choice of the
// figure under a latency bound, the fleet's arithmetic, the inference profiles, and VALIDATION.md's inference table.
// Links joule_sim only (no LibTorch).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "test_util.h"
#include "trainer/cost/hardware.h"
#include "trainer/sim/inference_sizing.h"
#include "trainer/sim/validation.h"

namespace joule {
namespace {

using cost::InferenceFigure;
using cost::InstanceProfile;
using sim::FleetSizing;
using sim::InferenceRate;
using sim::InferenceWorkload;

const std::string kConfigs = JOULE_CONFIG_DIR;
const std::string kPresets = kConfigs + "/models";
const std::string kInference = kConfigs + "/hardware/inference";

InferenceWorkload workload(const std::string& model, int64_t seq_len, double rate_per_hour = 1e6) {
  InferenceWorkload w;
  w.model_name = model;
  w.model = models::load_config(model, kPresets);
  w.seq_len = seq_len;
  w.rate_per_hour = rate_per_hour;
  w.headroom = 0;
  w.grid_g_per_kwh = 400;
  return w;
}

InferenceFigure figure(const std::string& model, int64_t seq_len, int64_t batch, double per_s, double p99_ms) {
  InferenceFigure f;
  f.model = model;
  f.published_as = model;
  f.seq_len = seq_len;
  f.batch = batch;
  f.precision = "bf16";
  f.inferences_per_s = per_s;
  f.p99_ms = p99_ms;
  f.source = "test";
  return f;
}

// An instance at 1 USD/h drawing 100 W idle and 300 W busy (devices), host and RAM at 0: the arithmetic shows.
InstanceProfile simple_instance() {
  InstanceProfile p;
  p.name = "x";
  p.device_kind = "gpu";
  p.devices = 1;
  p.device_idle_w = 100;
  p.device_max_w = 300;
  p.usd_per_hour = 1;
  p.pue = 1.5;
  return p;
}

TEST(InferenceSizing, FiguresAtAnotherLengthOrModelScaleByFlops) {
  const auto w = workload("bert-base", 512);
  const InferenceRate same = sim::rate_for(figure("bert-base", 512, 1, 50, 20), w, kPresets);
  EXPECT_EQ(same.match, 3);
  EXPECT_DOUBLE_EQ(same.inferences_per_s, 50);
  EXPECT_EQ(same.basis, "published");
  // LayoutLM-base has BERT-base's GEMMs: its figures are not scaled, and say so.
  const InferenceRate layoutlm =
      sim::rate_for(figure("bert-base", 512, 1, 50, 20), workload("layoutlm-base", 512), kPresets);
  EXPECT_EQ(layoutlm.match, 3);
  EXPECT_DOUBLE_EQ(layoutlm.inferences_per_s, 50);
  EXPECT_NE(layoutlm.basis.find("the same encoder"), std::string::npos) << layoutlm.basis;
  // From 128 tokens: fewer per second and longer calls by the ratio of FLOPs per inference (above 4: attention grows
  // with the square of the length).
  const double ratio = sim::inference_flops(w.model, 512) / sim::inference_flops(w.model, 128);
  EXPECT_GT(ratio, 4.0);
  EXPECT_LT(ratio, 5.0);
  const InferenceRate short_seq = sim::rate_for(figure("bert-base", 128, 4, 1000, 10), w, kPresets);
  EXPECT_EQ(short_seq.match, 1);  // the same encoder at another length
  EXPECT_NEAR(short_seq.inferences_per_s, 1000 / ratio, 1e-9);
  EXPECT_NEAR(short_seq.p99_ms, 10 * ratio, 1e-9);
  EXPECT_NE(short_seq.basis.find("scaled by FLOPs"), std::string::npos) << short_seq.basis;
  const InferenceRate large = sim::rate_for(figure("bert-large", 512, 1, 30, 40), w, kPresets);
  EXPECT_EQ(large.match, 2);  // the same length, another encoder
  EXPECT_EQ(sim::rate_for(figure("bert-large", 128, 1, 30, 40), w, kPresets).match, 0);
  // A figure at a length the model does not have is refused, naming it.
  try {
    sim::rate_for(figure("bert-base", 4096, 1, 30, 40), w, kPresets);
    ADD_FAILURE() << "no error for seq_len 4096";
  } catch (const joule::Error& e) {
    EXPECT_NE(std::string(e.what()).find("sequence length 4096 is outside bert-base's 1..512 positions"),
              std::string::npos)
        << e.what();
  }
  EXPECT_GT(large.inferences_per_s, 30 * 2.5);  // BERT-Large: about 3.5x the FLOPs
}

TEST(InferenceSizing, FleetArithmetic) {
  auto w = workload("bert-base", 128, 360000);  // 100 per second
  w.headroom = 0.25;
  const InstanceProfile p = simple_instance();
  const std::vector<InferenceRate> rates = {sim::rate_for(figure("bert-base", 128, 8, 30, 50), w, kPresets)};
  const FleetSizing s = sim::size_fleet(p, rates, w);
  ASSERT_TRUE(s.sized);
  EXPECT_EQ(s.instances, 5);  // ceil(100 x 1.25 / 30) = ceil(4.17)
  EXPECT_NEAR(s.utilisation, 100.0 / 150, 1e-12);
  EXPECT_NEAR(s.instance_power_w, 100 + 200 * (100.0 / 150), 1e-9);
  EXPECT_NEAR(s.usd_per_hour, 5.0, 1e-12);
  EXPECT_NEAR(s.usd_per_million, 5.0 / 0.36, 1e-9);  // 0.36 million per hour
  EXPECT_NEAR(s.kwh_per_million, 5 * s.instance_power_w * 1.5 / 1000 / 0.36, 1e-9);
  EXPECT_NEAR(s.co2_kg_per_million, s.kwh_per_million * 0.4, 1e-12);
  // Exactly the capacity needed: no extra instance for rounding.
  w.headroom = 0;
  w.rate_per_hour = 3600 * 90;
  EXPECT_EQ(sim::size_fleet(p, rates, w).instances, 3);
}

TEST(InferenceSizing, TheBoundPicksTheFigure) {
  auto w = workload("bert-base", 128);
  const InstanceProfile p = simple_instance();
  std::vector<InferenceRate> rates;
  for (const auto& f : {figure("bert-base", 128, 1, 100, 12), figure("bert-base", 128, 16, 900, 40),
                        figure("bert-base", 128, 64, 1500, 0)})  // the last: latency not published
    rates.push_back(sim::rate_for(f, w, kPresets));
  // No bound: the best throughput.
  EXPECT_EQ(sim::size_fleet(p, rates, w).rate.batch, 64);
  // A bound: a known latency within it beats an unknown one, whatever the throughput.
  w.p99_ms = 50;
  FleetSizing s = sim::size_fleet(p, rates, w);
  EXPECT_EQ(s.rate.batch, 16);
  EXPECT_TRUE(s.note.empty()) << s.note;
  w.p99_ms = 20;
  EXPECT_EQ(sim::size_fleet(p, rates, w).rate.batch, 1);
  // Only the unknown one: sized on it, and the row says the bound is not checked.
  w.p99_ms = 45;
  s = sim::size_fleet(p, {rates[2]}, w);
  ASSERT_TRUE(s.sized);
  EXPECT_EQ(s.rate.batch, 64);
  EXPECT_NE(s.note.find("not checked"), std::string::npos) << s.note;
  // Without a published latency a figure still cannot beat batch / throughput: 64 / 1500 per second is 42.7 ms.
  w.p99_ms = 40;
  s = sim::size_fleet(p, {rates[2]}, w);
  EXPECT_FALSE(s.sized);
  EXPECT_NE(s.note.find("(the lowest: 42.7 ms)"), std::string::npos) << s.note;
  w.p99_ms = 5;
  // None within: not sized, and the note gives the lowest latency there is.
  rates.pop_back();
  s = sim::size_fleet(p, rates, w);
  EXPECT_FALSE(s.sized);
  EXPECT_NE(s.note.find("no figure meets p99 <= 5 ms (the lowest: 12 ms)"), std::string::npos) << s.note;
  EXPECT_FALSE(sim::size_fleet(p, {}, w).sized);
}

TEST(InferenceSizing, ARateNoFigureIsMeantForIsNotSized) {
  auto w = workload("bert-base", 128, 1e12);
  const InstanceProfile p = simple_instance();
  const FleetSizing s = sim::size_fleet(p, {sim::rate_for(figure("bert-base", 128, 1, 0.01, 0), w, kPresets)}, w);
  EXPECT_FALSE(s.sized);
  EXPECT_NE(s.note.find("needs more than 1000000000 instances"), std::string::npos) << s.note;
}

TEST(InferenceSizing, AnUnscaledFigureBeatsAFasterScaledOne) {
  const auto w = workload("bert-base", 512);
  const InstanceProfile p = simple_instance();
  const std::vector<InferenceRate> rates = {sim::rate_for(figure("bert-base", 128, 16, 3000, 11), w, kPresets),
                                            sim::rate_for(figure("bert-base", 512, 1, 90, 11), w, kPresets)};
  ASSERT_GT(rates[0].inferences_per_s, rates[1].inferences_per_s);
  EXPECT_EQ(sim::size_fleet(p, rates, w).rate.inferences_per_s, 90);
}

TEST(InferenceProfiles, EveryProfileLoadsAndEveryNumberHasASource) {
  const auto names = cost::list_instance_profiles(kInference);
  for (const char* required : {"inf1.xlarge", "inf1.2xlarge", "inf2.xlarge", "g4dn.xlarge", "g4dn.2xlarge", "g5.xlarge",
                               "c5.xlarge", "c6i.xlarge", "c7i.xlarge"})
    EXPECT_NE(std::find(names.begin(), names.end(), required), names.end()) << required;
  for (const auto& n : names) {
    const InstanceProfile p = cost::load_instance_profile(n, kInference);
    EXPECT_EQ(p.name, n);
    EXPECT_GT(p.usd_per_hour, 0) << n;
    for (const InferenceFigure& f : p.inference) {
      EXPECT_NO_THROW(models::load_config(f.model, kPresets)) << n << ": " << f.model;
      EXPECT_NE(f.source.find("https://"), std::string::npos) << n << ": a figure's source names no public page";
    }
    EXPECT_EQ(joule::test::unsourced_numbers(p.file), std::vector<std::string>{}) << "every number needs a source";
  }
}

TEST(InferenceProfiles, BadFiguresNameTheFileAndTheKey) {
  test::TempDir t;
  const std::string head =
      "name = \"x\"\n[host]\ncpu_idle_w = 1\ncpu_max_w = 2\nram_w = 1\nusd_per_hour = 1\npue = 1.2\n"
      "[device]\nkind = \"inferentia\"\ncount = 1\nmax_w = 50\npeak_tflops = { bf16 = 64 }\n";
  const std::string ok =
      "[[inference]]\nmodel = \"bert-base\"\nseq_len = 128\nbatch = 1\nprecision = \"bf16\"\n"
      "inferences_per_s = 10\nsource = \"s\"\n";
  auto expect_error = [&](const std::string& body, const std::string& fragment) {
    test::write_file(t.file("x.toml"), head + body);
    try {
      cost::load_instance_profile(t.file("x.toml"), t.path());
      ADD_FAILURE() << "no error for: " << body;
    } catch (const cost::ProfileError& e) {
      EXPECT_NE(std::string(e.what()).find(fragment), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(t.file("x.toml")), std::string::npos) << e.what();
    }
  };
  expect_error(ok + "watts = 3\n", "unknown key 'inference[0].watts'");
  expect_error(ok + ok + "[[inference]]\nmodel = \"bert-base\"\n", "missing key 'inference[2].seq_len'");
  expect_error(ok + "p50_ms = 9\np99_ms = 5\n", "p50_ms <= p95_ms <= p99_ms");
  expect_error(
      "[[inference]]\nmodel = \"bert-base\"\nseq_len = 128\nbatch = 0\nprecision = \"bf16\"\n"
      "inferences_per_s = 10\nsource = \"s\"\n",
      "'inference[0].batch' must be a whole number from 1 to 1000000, found 0");
  expect_error(ok + "p50_ms = nan\n", "'inference[0].p50_ms' must be a positive number, found nan");
  expect_error(
      "[[inference]]\nmodel = \"bert-base\"\nseq_len = 128.5\nbatch = 1\nprecision = \"bf16\"\n"
      "inferences_per_s = 10\nsource = \"s\"\n",
      "'inference[0].seq_len' must be a whole number from 1 to 1000000, found 128.5");
  test::write_file(t.file("x.toml"), "inference = 3\n" + head);
  try {
    cost::load_instance_profile(t.file("x.toml"), t.path());
    ADD_FAILURE() << "no error for inference = 3";
  } catch (const cost::ProfileError& e) {
    EXPECT_NE(std::string(e.what()).find("'inference' must be an array of tables"), std::string::npos) << e.what();
  }
  test::write_file(t.file("x.toml"), head + ok);
  EXPECT_EQ(cost::load_instance_profile(t.file("x.toml"), t.path()).inference.size(), 1u);
}

TEST(InferenceValidation, TheDocumentShowsWhatThePlannerComputes) {
  const auto cases = sim::inference_validation_cases(kConfigs);
  ASSERT_GE(cases.size(), 10u);
  for (const auto& c : cases) EXPECT_TRUE(std::isfinite(c.predicted)) << c.name;
  std::ifstream in(std::string(JOULE_SOURCE_DIR) + "/VALIDATION.md");
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_NE(ss.str().find(sim::validation_table(cases)), std::string::npos)
      << "VALIDATION.md's inference table is stale; it is now:\n"
      << sim::validation_table(cases);
}

}  // namespace
}  // namespace joule
