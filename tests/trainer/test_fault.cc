// JOULE_FAULT parsing: every kind, defaults, and each malformed spec as an error naming the bad part.
#include <gtest/gtest.h>

#include "trainer/fault.h"

using joule::trainer::FaultError;
using joule::trainer::FaultKind;
using joule::trainer::FaultPlan;

TEST(Fault, ParsesEveryKindWithDefaults) {
  const FaultPlan p = FaultPlan::parse(
      "kill:rank=1,step=7;kill-in-checkpoint:step=10,stage=renamed;stall:rank=1,step=3,seconds=2.5;nan:step=4,count=3;"
      "preempt:step=9;corrupt-shard:rank=1,step=2;fail-fsync:step=5;stale-checkpoint-view:rank=1;"
      "kill-in-checkpoint:step=11;stall:step=12,stage=rng");
  ASSERT_EQ(p.faults().size(), 10u);
  EXPECT_EQ(p.at(FaultKind::kill_in_checkpoint, 0, 11)->stage, "model");  // the default stage
  EXPECT_EQ(p.at(FaultKind::stall, 1, 3)->stage, "");                     // before the step
  EXPECT_EQ(p.at(FaultKind::stall, 0, 12)->stage, "rng");                 // inside the checkpoint
  EXPECT_NE(p.at(FaultKind::fail_fsync, 0, 5), nullptr);
  EXPECT_EQ(p.at(FaultKind::fail_fsync, 0, 6), nullptr);
  EXPECT_NE(p.at(FaultKind::stale_checkpoint_view, 1, 1), nullptr);  // acts at resume: step 1 stands for it
  EXPECT_TRUE(joule::trainer::FaultPoints(p, 1).stale_checkpoint_view());
  EXPECT_FALSE(joule::trainer::FaultPoints(p, 0).stale_checkpoint_view());
  EXPECT_NE(p.at(FaultKind::kill, 1, 7), nullptr);
  EXPECT_EQ(p.at(FaultKind::kill, 0, 7), nullptr);  // another rank
  EXPECT_EQ(p.at(FaultKind::kill, 1, 8), nullptr);  // another step
  EXPECT_EQ(p.at(FaultKind::kill_in_checkpoint, 0, 10)->stage, "renamed");
  EXPECT_DOUBLE_EQ(p.at(FaultKind::stall, 1, 3)->seconds, 2.5);
  // Another rank may stop inside a checkpoint at the stage every rank writes (its rng file).
  EXPECT_EQ(
      FaultPlan::parse("kill-in-checkpoint:rank=1,step=3,stage=rng").at(FaultKind::kill_in_checkpoint, 1, 3)->stage,
      "rng");
  EXPECT_EQ(p.at(FaultKind::nan, 0, 3), nullptr);
  EXPECT_NE(p.at(FaultKind::nan, 0, 4), nullptr);
  EXPECT_NE(p.at(FaultKind::nan, 0, 6), nullptr);  // count 3: steps 4, 5, 6
  EXPECT_EQ(p.at(FaultKind::nan, 0, 7), nullptr);
  EXPECT_EQ(p.at(FaultKind::preempt, 0, 9)->rank, 0);  // rank defaults to 0
  EXPECT_NE(p.at(FaultKind::corrupt_shard, 1, 2), nullptr);
  EXPECT_TRUE(FaultPlan::parse("").empty());
}

TEST(Fault, MalformedSpecsAreErrorsNamingThePart) {
  const std::pair<const char*, const char*> cases[] = {
      {"explode:step=3", "unknown fault 'explode'"},
      {"kill:rank=1", "needs step=N"},
      {"kill:step=0", "needs step=N"},
      {"kill:step=three", "kill:step=three: step is 'three', not a number"},
      {"kill:step=3,seconds=4", "key 'seconds' does not apply to 'kill'"},
      {"stall:step=3,rank", "'rank' in 'stall:step=3,rank' is not key=value"},
      {"kill-in-checkpoint:step=3,stage=halfway", "stage 'halfway'"},
      {"stall:step=3,stage=after", "stage 'after'"},
      {"nan:step=3,stage=rng", "key 'stage' does not apply to 'nan'"},
      {"nan:step=3,count=0", "count >= 1"},
      {"kill-in-checkpoint:rank=1,step=3,stage=manifest", "stage 'manifest' is written by rank 0 alone, so rank 1"},
      {"stall:rank=2,step=3,stage=model", "stage 'model' is written by rank 0 alone, so rank 2"},
      {"stale-checkpoint-view:rank=1,step=4", "takes no step"},
  };
  for (const auto& [spec, expect] : cases) {
    SCOPED_TRACE(spec);
    try {
      FaultPlan::parse(spec);
      ADD_FAILURE() << "no error";
    } catch (const FaultError& e) {
      EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("JOULE_FAULT"), std::string::npos) << e.what();
    }
  }
}

TEST(Fault, ARankOutsideTheRunIsAnErrorNamingTheFaultAndTheRanks) {
  const FaultPlan p = FaultPlan::parse("nan:step=2;stall:rank=2,step=5,seconds=9");
  EXPECT_NO_THROW(p.check_ranks(3));
  try {
    p.check_ranks(2);
    ADD_FAILURE() << "no error";
  } catch (const FaultError& e) {
    EXPECT_NE(std::string(e.what()).find("JOULE_FAULT: 'stall:rank=2,step=5,seconds=9': rank 2 is not one of this "
                                         "run's 2 rank(s) (0 to 1), so it would never act"),
              std::string::npos)
        << e.what();
  }
  EXPECT_NO_THROW(FaultPlan().check_ranks(1));
}
