// The trainer's stages on their own, without a training run: each decision in a small test, so a change to one stage
// fails here, not in a two-minute end-to-end run.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <utility>

#include "trainer/checkpoint_policy.h"
#include "trainer/fault.h"
#include "trainer/run_config.h"
#include "trainer/step_boundary.h"
#include "trainer/train_step.h"
#include "test_util.h"

namespace {

using joule::trainer::CheckpointOptions;
using joule::trainer::CheckpointPolicy;
using joule::trainer::FaultPlan;
using joule::trainer::FaultPoints;
using joule::trainer::StepBoundary;

StepBoundary reduced(double preempt, double checkpoint_due) {
  StepBoundary b;
  b.preempt = preempt;
  b.checkpoint_due = checkpoint_due;
  return b;
}

CheckpointOptions every(int64_t steps, double minutes = 0) {
  CheckpointOptions o;
  o.every_steps = steps;
  o.every_minutes = minutes;
  return o;
}

// Every combination of the three triggers (the step count, the minutes vote, a preemption vote from any number of
// ranks), written out: what decide() must answer for each.
TEST(CheckpointPolicy, DecidesFromEveryCombinationOfStepMinuteAndSignalTriggers) {
  struct Case {
    int64_t every_steps, step;
    double preempt, due;
    bool save, preempted;
  };
  const Case cases[] = {
      // every 3 steps
      {3, 1, 0, 0, false, false}, {3, 2, 0, 0, false, false}, {3, 3, 0, 0, true, false},  {3, 6, 0, 0, true, false},
      {3, 4, 0, 1, true, false},  {3, 3, 0, 1, true, false},  {3, 4, 1, 0, true, true},   {3, 3, 1, 0, true, true},
      {3, 4, 2, 1, true, true},   {3, 5, 4, 0, true, true},   {3, 7, 0, 0, false, false},
      // steps off: only the minutes and the signals save
      {0, 1, 0, 0, false, false}, {0, 3, 0, 0, false, false}, {0, 3, 0, 1, true, false},  {0, 3, 1, 0, true, true},
      {0, 3, 1, 1, true, true},
      // every step
      {1, 1, 0, 0, true, false},  {1, 2, 0, 0, true, false},  {1, 2, 1, 0, true, true},
  };
  for (const Case& c : cases) {
    const CheckpointPolicy policy(every(c.every_steps), /*root=*/true);
    const CheckpointPolicy::Decision d = policy.decide(c.step, reduced(c.preempt, c.due));
    EXPECT_EQ(d.save, c.save) << "every_steps " << c.every_steps << ", step " << c.step << ", preempt " << c.preempt << ", due " << c.due;
    EXPECT_EQ(d.preempted, c.preempted) << "every_steps " << c.every_steps << ", step " << c.step << ", preempt " << c.preempt;
  }
}

// Only rank 0's clock votes for the minutes trigger, so every rank saves together; off when every_minutes is 0.
TEST(CheckpointPolicy, OnlyRankZerosClockVotesForTheMinutes) {
  const FaultPoints none(FaultPlan(), 0);
  const struct {
    double minutes;
    bool root, due;
  } cases[] = {{1e-9, true, true}, {1e-9, false, false}, {0, true, false}, {60, true, false}};
  for (const auto& c : cases) {
    const CheckpointPolicy policy(every(0, c.minutes), c.root);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));  // 1e-9 minutes (60 ns) have passed; 60 minutes have not
    StepBoundary b;
    policy.vote(1, none, b);
    EXPECT_EQ(b.checkpoint_due, c.due ? 1.0 : 0.0) << "every_minutes " << c.minutes << ", root " << c.root;
    EXPECT_EQ(b.preempt, 0.0);
  }
}

// The minutes vote and the step trigger reach decide() only through the reduced boundary: two ranks' votes sum.
TEST(CheckpointPolicy, ReducedVotesOfSeveralRanksStillMeanOneSave) {
  const CheckpointPolicy policy(every(0), /*root=*/false);
  const CheckpointPolicy::Decision d = policy.decide(5, reduced(/*preempt=*/3, /*due=*/1));
  EXPECT_TRUE(d.save);
  EXPECT_TRUE(d.preempted);
}

// The step's sums stay on the device and are read once per logging interval: the figures must be exactly those of
// reading every batch's losses and counts on the host and adding them there, as the trainer did before.
TEST(DeviceSums, ReadOnceEqualsAddingEveryBatchOnTheHost) {
  const joule::models::BertConfig config = joule::test::small_bert(211, 48, 3, 96, 64, 0.0);
  joule::models::BertForPreTraining model(config, 7);
  joule::trainer::DeviceSums device, interval;
  joule::trainer::BatchSums host;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    const joule::models::PretrainingBatch batch = joule::models::synthetic_batch(config, 3 + static_cast<int64_t>(seed), 32, 5, seed);
    const joule::models::PretrainingOutput out = model->forward(batch);
    device.add(out, batch.input_ids.size(0));
    host.mlm_loss += out.mlm_loss.item<double>();
    host.nsp_loss += out.nsp_loss.item<double>();
    host.mlm_correct += static_cast<double>(out.mlm_correct.item<int64_t>());
    host.nsp_correct += static_cast<double>(out.nsp_correct.item<int64_t>());
    host.mlm_predictions += static_cast<double>(out.mlm_predictions);
    host.sequences += static_cast<double>(batch.input_ids.size(0));
    host.batches += 1;
    if (seed == 2 || seed == 5) interval.add(std::exchange(device, joule::trainer::DeviceSums{}));  // two "steps"
  }
  const joule::trainer::BatchSums read = interval.read();
  EXPECT_EQ(read.mlm_loss, host.mlm_loss);
  EXPECT_EQ(read.nsp_loss, host.nsp_loss);
  EXPECT_EQ(read.mlm_correct, host.mlm_correct);
  EXPECT_EQ(read.nsp_correct, host.nsp_correct);
  EXPECT_EQ(read.mlm_predictions, host.mlm_predictions);
  EXPECT_EQ(read.sequences, host.sequences);
  EXPECT_EQ(read.batches, 5);
  EXPECT_GT(read.mlm_correct + read.nsp_correct, 0);  // the counts arrived, not zeros
  const joule::trainer::BatchSums empty = joule::trainer::DeviceSums{}.read();
  EXPECT_EQ(empty.batches, 0);
  EXPECT_EQ(empty.mlm_loss, 0);
}

// A preempt fault at step 2 votes like a signal from then on (the signal is not forgotten: the run exits after the
// checkpoint). Last in this file: the signal flag is process-wide.
TEST(CheckpointPolicy, APreemptFaultVotesLikeASignal) {
  const FaultPoints faults(FaultPlan::parse("preempt:step=2"), 0);
  const CheckpointPolicy policy(every(0), /*root=*/true);
  StepBoundary b1;
  policy.vote(1, faults, b1);
  EXPECT_EQ(b1.preempt, 0.0);
  StepBoundary b2;
  policy.vote(2, faults, b2);
  EXPECT_EQ(b2.preempt, 1.0);
  const CheckpointPolicy::Decision d = policy.decide(2, b2);
  EXPECT_TRUE(d.save && d.preempted);
}

}  // namespace
