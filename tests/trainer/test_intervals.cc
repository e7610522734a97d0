// The accounting and metrics stages of a training run, without a model or a communicator: the ledger's segment
// brought up to date at each interval's end (and a resumed ledger's segments), and the metrics line that rank 0
// writes from the sums reduced over ranks. Expected figures are worked out by hand from the inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "test_util.h"
#include "trainer/loss_spike.h"
#include "trainer/metrics_logger.h"
#include "trainer/run_accounting.h"
#include "trainer/step_boundary.h"

namespace {

namespace fs = std::filesystem;
using joule::cost::AccountingOptions;
using joule::cost::Component;
using joule::cost::EnergyTotals;
using joule::cost::Source;
using joule::test::TempDir;
using joule::trainer::MetricsLogger;
using joule::trainer::MetricsSettings;
using joule::trainer::RunAccounting;
using joule::trainer::StepBoundary;
using joule::trainer::StepRecord;

constexpr double kJoulesPerKwh = 3.6e6;

std::string configs_dir() { return std::string(JOULE_TEST_FIXTURES) + "/../../configs"; }

// A one-rank run billed at a fixed price with the model meter only: nothing depends on the host.
AccountingOptions fixed_billing() {
  AccountingOptions o;
  o.meters = "model";
  o.price_per_hour = 3.6;
  o.pue = 1.5;
  o.grid_intensity = 400;
  return o;
}

// A one-rank run's accounting, billed as fixed_billing(), its segment begun at `step` after `sequences`: a fresh run
// (`saved` empty) or one resumed from a checkpoint's ledger.
std::unique_ptr<RunAccounting> begin_run(const std::string& saved = "", int64_t step = 0, int64_t sequences = 0) {
  const joule::collectives::ProcessGroupInfo one_rank;
  auto accounting = std::make_unique<RunAccounting>(fixed_billing(), "cpu", configs_dir(), one_rank);
  accounting->begin_segment(saved, step, sequences, "intervals");
  return accounting;
}

EnergyTotals cpu_joules(double joules) {
  EnergyTotals e;
  e.at(Component::cpu, Source::model) = joules;
  return e;
}

std::vector<nlohmann::json> read_lines(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(nlohmann::json::parse(line));
  return lines;
}

StepRecord step(int64_t n, int64_t global_batch, double seconds) {
  StepRecord r;
  r.step = n;
  r.sequences = n * global_batch;
  r.step_sequences = global_batch;  // unpacked rows: one sequence each
  r.seconds = seconds;
  r.comm_seconds = seconds / 4;
  r.exposed_comm_seconds = seconds / 8;
  r.data_wait_seconds = seconds / 16;
  r.comm_bytes = 1e6 * seconds;
  r.lr = 1e-4 * static_cast<double>(n);
  r.grad_norm = 2.0;
  return r;
}

}  // namespace

// MFU is measured against the devices the ranks use, one a rank, at most the instances' (p4d.24xlarge: 8 A100s at 312
// bf16 TFLOP/s each); the bill stays the whole instances'. 156 TFLOP a second per rank is half a device's peak.
TEST(RunAccounting, MfuIsAgainstThePeakOfTheDevicesInUse) {
  AccountingOptions o = fixed_billing();
  o.instance = "p4d.24xlarge";
  struct Case {
    int ranks, nodes;
    double mfu;
  };
  for (const Case c : {Case{1, 1, 0.5},      // one GPU of the eight
                       Case{16, 2, 0.5},     // all sixteen
                       Case{9, 2, 0.5},      // nine, spread unevenly
                       Case{16, 1, 1.0}}) {  // sixteen ranks on eight GPUs: the instance's peak, twice the work
    SCOPED_TRACE(std::to_string(c.ranks) + " ranks on " + std::to_string(c.nodes) + " node(s)");
    joule::collectives::ProcessGroupInfo info;
    info.world_size = c.ranks;
    info.node_count = c.nodes;
    RunAccounting a(o, "cuda", configs_dir(), info);
    a.begin_segment("", 0, 0, "mfu");
    a.set_mfu_basis(1e12, "bf16");  // 1 TFLOP per sequence
    a.set_segment_timing(156 * c.ranks, 1.0);
    ASSERT_TRUE(a.mfu(0).has_value());
    EXPECT_NEAR(*a.mfu(0), c.mfu, 1e-12);
  }
}

TEST(RunAccounting, ASegmentFollowsTheIntervalsAndAResumeAddsOne) {
  const auto fresh = begin_run();
  RunAccounting& first = *fresh;
  ASSERT_EQ(first.ledger().segments.size(), 1u);
  EXPECT_FALSE(first.ledger().run_id.empty());
  EXPECT_EQ(first.ledger().project_name, "intervals");
  EXPECT_EQ(first.ledger().segments[0].status, "running");

  // Each update replaces the segment's figures by the totals since the run began (the meters count from start).
  first.update_segment(cpu_joules(0.5 * kJoulesPerKwh), 10, 80, "running");
  first.update_segment(cpu_joules(kJoulesPerKwh), 20, 160, "running");
  const auto& s = first.ledger().segments[0];
  EXPECT_EQ(s.start_step, 0);
  EXPECT_EQ(s.end_step, 20);
  EXPECT_EQ(s.sequences, 160);
  EXPECT_GT(s.wall_s, 0);
  const auto spent = first.ledger().totals();
  EXPECT_DOUBLE_EQ(spent.it_kwh, 1.0);
  EXPECT_DOUBLE_EQ(spent.facility_kwh, 1.5);                  // PUE 1.5
  EXPECT_DOUBLE_EQ(spent.co2_kg, 0.6);                        // 1.5 kWh at 400 g/kWh
  EXPECT_DOUBLE_EQ(spent.usd, s.wall_s / 3600.0 * 3.6);       // one node at USD 3.6/h
  const std::string saved = first.ledger().to_json().dump();  // as a checkpoint at step 20 keeps it

  // Resumed from that checkpoint: the earlier segment is kept (marked interrupted, counted to its checkpoint) and a
  // new one counts this process's sequences and energy from step 20 on.
  const auto resumed = begin_run(saved, 20, 160);
  RunAccounting& second = *resumed;
  ASSERT_EQ(second.ledger().segments.size(), 2u);
  EXPECT_EQ(second.ledger().run_id, first.ledger().run_id);
  EXPECT_EQ(second.ledger().segments[0].status, "interrupted (counted to its last checkpoint)");
  EXPECT_EQ(second.ledger().segments[0].sequences, 160);
  second.update_segment(cpu_joules(0.25 * kJoulesPerKwh), 25, 200, "finished");
  const auto& g = second.ledger().segments[1];
  EXPECT_EQ(g.start_step, 20);
  EXPECT_EQ(g.end_step, 25);
  EXPECT_EQ(g.sequences, 40);
  EXPECT_EQ(g.status, "finished");
  EXPECT_DOUBLE_EQ(second.ledger().totals().it_kwh, 1.25);  // both segments
  EXPECT_DOUBLE_EQ(second.ledger().wall_s(), second.ledger().segments[0].wall_s + g.wall_s);
}

TEST(MetricsLogger, AnIntervalEndsEveryNStepsAndAtTheLastStep) {
  MetricsSettings m;
  m.log_every_steps = 4;
  m.total_steps = 10;
  MetricsLogger logger(m, "", false);
  std::vector<int64_t> ends;
  for (int64_t s = 1; s <= 10; ++s)
    if (logger.interval_ends(s)) ends.push_back(s);
  EXPECT_EQ(ends, (std::vector<int64_t>{4, 8, 10}));
}

// Two intervals of two steps; the first step is the throughput warm-up. Every figure of the line is worked out
// from the records, the reduced sums and the energy here.
TEST(MetricsLogger, WritesEachIntervalsLineFromTheReducedSums) {
  TempDir run;
  const auto billed = begin_run();
  RunAccounting& accounting = *billed;
  MetricsSettings m;
  m.log_every_steps = 2;
  m.throughput_warmup_steps = 1;
  m.total_steps = 4;
  m.global_batch = 8;
  m.seq_len = 128;
  m.target_sequences = 1000000;  // far away: no projection in these lines
  MetricsLogger logger(m, run.path(), true);

  logger.record_step(step(1, 8, 1.0));
  logger.record_step(step(2, 8, 0.5));
  StepBoundary reduced;             // as summed over the ranks: 3 micro-batches in the interval
  reduced.interval.mlm_loss = 9.0;  // the micro-batches' means: not the figure (a prediction's weight would depend on
  reduced.interval.nsp_loss = 3.0;  // how many share its micro-batch)
  reduced.interval.batches = 3;
  reduced.interval.mlm_loss_total = 200;
  reduced.interval.nsp_loss_total = 8;
  reduced.interval.sequences = 16;
  reduced.interval.mlm_correct = 30;
  reduced.interval.mlm_predictions = 100;
  reduced.energy = cpu_joules(3600);
  logger.write_interval(reduced, accounting, nullptr);

  logger.record_step(step(3, 8, 2.0));
  logger.record_step(step(4, 8, 2.0));
  reduced.interval.mlm_loss = 4.0;
  reduced.interval.nsp_loss = 2.0;
  reduced.interval.batches = 4;
  reduced.interval.mlm_loss_total = 100;
  reduced.interval.nsp_loss_total = 8;
  reduced.interval.sequences = 16;
  reduced.interval.mlm_correct = 50;
  reduced.interval.mlm_predictions = 100;
  reduced.energy = cpu_joules(7200);
  logger.write_interval(reduced, accounting, nullptr);
  logger.write_eval(4, 4 * 64, joule::cost::EvalFigures{2.0, 0.5, 2.5, 0.6, 0.9, 64});

  const std::vector<nlohmann::json> lines = read_lines(run.path() + "/metrics.jsonl");
  ASSERT_EQ(lines.size(), 3u);
  const nlohmann::json& a = lines[0];
  EXPECT_EQ(a["step"], 2);
  EXPECT_EQ(a["sequences"], 16);
  EXPECT_DOUBLE_EQ(a["mlm_loss"], 2.0);  // per prediction
  EXPECT_DOUBLE_EQ(a["nsp_loss"], 0.5);
  EXPECT_DOUBLE_EQ(a["loss"], 2.5);
  EXPECT_DOUBLE_EQ(a["mlm_acc"], 0.3);
  EXPECT_DOUBLE_EQ(a["lr"], 2e-4);         // the interval's last step
  EXPECT_DOUBLE_EQ(a["seq_per_s"], 16.0);  // step 2 only (step 1 is the warm-up): 8 sequences in 0.5 s
  EXPECT_DOUBLE_EQ(a["seq_per_hour"], 16.0 * 3600);
  EXPECT_DOUBLE_EQ(a["tokens_per_s"], 16.0 * 128);
  EXPECT_DOUBLE_EQ(a["step_s"], 0.75);  // the interval's mean step, warm-up included
  EXPECT_DOUBLE_EQ(a["comm_s"], 0.75 / 4);
  EXPECT_DOUBLE_EQ(a["exposed_comm_s"], 0.75 / 8);
  EXPECT_DOUBLE_EQ(a["data_wait_s"], 0.75 / 16);
  EXPECT_DOUBLE_EQ(a["comm_bytes"], 0.75e6);  // per step, over the interval
  EXPECT_DOUBLE_EQ(a["it_kwh"], 0.001);       // 3600 J
  EXPECT_DOUBLE_EQ(a["energy_kwh"], 0.0015);
  EXPECT_FALSE(a.contains("projection"));

  const nlohmann::json& b = lines[1];
  EXPECT_EQ(b["step"], 4);
  EXPECT_DOUBLE_EQ(b["mlm_loss"], 1.0);
  EXPECT_DOUBLE_EQ(b["nsp_loss"], 0.5);
  EXPECT_DOUBLE_EQ(b["mlm_acc"], 0.5);
  EXPECT_DOUBLE_EQ(b["step_s"], 2.0);            // this interval's steps only
  EXPECT_DOUBLE_EQ(b["seq_per_s"], 24.0 / 4.5);  // every step after the warm-up: 3 x 8 sequences in 4.5 s
  EXPECT_DOUBLE_EQ(b["it_kwh"], 0.002);          // the meters' totals since start
  EXPECT_GT(b["power_w"].get<double>(), 0);      // 3600 J over the wall time between the two lines
  EXPECT_EQ(accounting.ledger().segments[0].end_step, 4);
  EXPECT_EQ(accounting.ledger().segments[0].sequences, 32);

  EXPECT_EQ(lines[2]["step"], 4);
  EXPECT_DOUBLE_EQ(lines[2]["eval"]["mlm_accuracy"], 0.6);
}

TEST(MetricsLogger, AResumedRunsRateIsEverySegmentsTimedStepsAndOnlyRankZeroWrites) {
  // A first segment timed 160 sequences in 10 s (its ledger, as its checkpoint saved it).
  const auto first = begin_run();
  first->set_segment_timing(160, 10.0);
  const std::string saved = first->ledger().to_json().dump();

  TempDir run;
  const auto resumed = begin_run(saved, 10, 80);
  RunAccounting& accounting = *resumed;
  MetricsSettings m;
  m.log_every_steps = 2;
  m.throughput_warmup_steps = 1;  // each segment's own first step is not timed
  m.total_steps = 20;
  m.global_batch = 8;
  m.start_step = 10;
  m.wall_before = 1000;
  m.timed_sequences_before = accounting.ledger().timed().first;
  m.timed_s_before = accounting.ledger().timed().second;
  EXPECT_EQ(m.timed_sequences_before, 160);
  MetricsLogger root(m, run.path(), true);
  root.record_step(step(11, 8, 5.0));                  // this segment's warm-up: left out
  EXPECT_DOUBLE_EQ(root.seq_per_s(-1), 160.0 / 10.0);  // the first segment's rate until this one times a step
  root.record_step(step(12, 8, 2.0));
  EXPECT_DOUBLE_EQ(root.seq_per_s(-1), 168.0 / 12.0);  // sum of sequences over sum of time, both segments
  EXPECT_GE(root.wall_s(), 1000);                      // earlier segments' training time counts
  root.record_timing(accounting);
  EXPECT_EQ(accounting.ledger().segments.back().timed_sequences, 8);
  EXPECT_DOUBLE_EQ(accounting.ledger().segments.back().timed_s, 2.0);
  EXPECT_EQ(accounting.ledger().timed(), std::make_pair(int64_t{168}, 12.0));

  TempDir other;
  MetricsLogger not_root(m, other.path(), false);
  not_root.record_step(step(11, 8, 1.0));
  not_root.record_step(step(12, 8, 1.0));
  StepBoundary reduced;
  reduced.interval.batches = 1;
  not_root.write_interval(reduced, accounting, nullptr);
  EXPECT_EQ(accounting.ledger().segments.back().end_step, 12);  // every rank keeps its ledger
  EXPECT_FALSE(fs::exists(other.path() + "/metrics.jsonl"));
}

// A loss above train.loss_spike_factor x its running mean is a spike, once the mean has 20 steps behind it; a falling
// loss, noise and NaN (a skipped step) are not; factor 0 watches nothing.
TEST(LossSpikeWatch, FlagsALossAboveTheFactorTimesItsRunningMean) {
  joule::trainer::LossSpikeWatch watch(2.0);
  EXPECT_FALSE(watch.observe(10.0));  // the first steps fall fast and are not judged
  for (int step = 1; step < 20; ++step) EXPECT_FALSE(watch.observe(step % 2 ? 2.0 : 2.2)) << step;
  for (int step = 0; step < 100; ++step) EXPECT_FALSE(watch.observe(step % 2 ? 2.0 : 2.3)) << step;
  EXPECT_FALSE(watch.observe(std::nan("")));
  const auto spike = watch.observe(5.0);
  ASSERT_TRUE(spike);
  EXPECT_NEAR(*spike, 2.15, 0.1);  // the first step's 10 has all but faded from the mean
  EXPECT_FALSE(watch.observe(2.1));
  joule::trainer::LossSpikeWatch off(0.0);
  for (int step = 0; step < 30; ++step) EXPECT_FALSE(off.observe(1.0));
  EXPECT_FALSE(off.observe(100.0));
}
