// The trainer's stages on their own, without a training run: each decision in a small test, so a change to one stage
// fails here, not in a two-minute end-to-end run.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <thread>
#include <utility>

#include "data/dataset.h"
#include "data/shard.h"
#include "launch/util/hash.h"
#include "test_util.h"
#include "trainer/checkpoint_policy.h"
#include "trainer/evaluator.h"
#include "trainer/fault.h"
#include "trainer/run_config.h"
#include "trainer/run_setup.h"
#include "trainer/step_boundary.h"
#include "trainer/train_step.h"

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
      {3, 1, 0, 0, false, false},
      {3, 2, 0, 0, false, false},
      {3, 3, 0, 0, true, false},
      {3, 6, 0, 0, true, false},
      {3, 4, 0, 1, true, false},
      {3, 3, 0, 1, true, false},
      {3, 4, 1, 0, true, true},
      {3, 3, 1, 0, true, true},
      {3, 4, 2, 1, true, true},
      {3, 5, 4, 0, true, true},
      {3, 7, 0, 0, false, false},
      // steps off: only the minutes and the signals save
      {0, 1, 0, 0, false, false},
      {0, 3, 0, 0, false, false},
      {0, 3, 0, 1, true, false},
      {0, 3, 1, 0, true, true},
      {0, 3, 1, 1, true, true},
      // every step
      {1, 1, 0, 0, true, false},
      {1, 2, 0, 0, true, false},
      {1, 2, 1, 0, true, true},
  };
  for (const Case& c : cases) {
    const CheckpointPolicy policy(every(c.every_steps), /*root=*/true);
    const CheckpointPolicy::Decision d = policy.decide(c.step, reduced(c.preempt, c.due));
    EXPECT_EQ(d.save, c.save) << "every_steps " << c.every_steps << ", step " << c.step << ", preempt " << c.preempt
                              << ", due " << c.due;
    EXPECT_EQ(d.preempted, c.preempted) << "every_steps " << c.every_steps << ", step " << c.step << ", preempt "
                                        << c.preempt;
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

// The batch arithmetic of run setup, case by case.
TEST(RunSetup, PlansTheBatchFromTheGlobalBatchOrTheAccumulation) {
  struct Case {
    int64_t micro_batch, accumulation, global_batch, steps, target_sequences;
    int world;
    int64_t want_accumulation, want_global, want_steps, want_target;
  };
  const Case cases[] = {
      {8, 1, 0, 100, 0, 2, 1, 16, 100, 1600},  // micro x accumulation x world; target from the steps
      {8, 4, 0, 100, 0, 2, 4, 64, 100, 6400},
      {8, 1, 64, 100, 0, 2, 4, 64, 100, 6400},  // the global batch sets the accumulation
      {8, 3, 64, 0, 1000, 4, 2, 64, 16, 1000},  // steps from the target, rounded up; the target kept
      {8, 1, 0, 0, 16, 2, 1, 16, 1, 16},
      {2, 1, 0, 7, 450000000, 1, 1, 2, 7, 450000000},  // steps win over the target for the count; the target is kept
  };
  for (const Case& c : cases) {
    joule::trainer::TrainOptions t;
    t.micro_batch = c.micro_batch;
    t.accumulation = c.accumulation;
    t.global_batch = c.global_batch;
    t.steps = c.steps;
    t.target_sequences = c.target_sequences;
    const joule::trainer::BatchPlan p = joule::trainer::plan_batches(t, c.world, 1 << 20, "shards");
    EXPECT_EQ(p.accumulation, c.want_accumulation) << "global batch " << c.global_batch << ", world " << c.world;
    EXPECT_EQ(p.global_batch, c.want_global);
    EXPECT_EQ(p.total_steps, c.want_steps);
    EXPECT_EQ(p.target_sequences, c.want_target);
  }
}

TEST(RunSetup, RefusesABatchThatDoesNotDivideOrExceedsTheDataNamingTheKeys) {
  joule::trainer::TrainOptions t;
  t.micro_batch = 8;
  t.global_batch = 48;
  t.steps = 10;
  auto message = [&](int world, int64_t available) {
    try {
      joule::trainer::plan_batches(t, world, available, "/data/train");
    } catch (const joule::RunConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(4, 1000), "train.global_batch 48 is not divisible by train.micro_batch 8 x world size 4");
  EXPECT_EQ(message(2, 40),
            "the global batch 48 (train.micro_batch 8 x accumulation 3 x 2 ranks) is larger than the 40 sequences "
            "of /data/train");
  t.global_batch = 0;
  t.steps = 0;
  EXPECT_EQ(message(1, 1000), "run config: set train.steps or train.target_sequences");
}

// A trainer_state.json at `step` (one digit), its fp32 GEMMs and compute precision recorded as given ("": a joule
// before the record).
std::string trainer_state(int step, const std::string& fp32_gemm, const std::string& precision = "") {
  auto key = [](const std::string& name, const std::string& value) {
    return value.empty() ? std::string() : ", \"" + name + "\": \"" + value + "\"";
  };
  return "{\"step\": " + std::to_string(step) +
         R"(, "optimizer_steps": 1, "epoch": 0, "position": 0, "sequences": 8, "wall_seconds": 1.0, "segments": 1, )"
         R"("world_size": 1, "config_hash": "x")" +
         key("fp32_gemm", fp32_gemm) + key("compute_precision", precision) + "}";
}

// A checkpoint directory that verifies (COMPLETE, a manifest with its one file's size and checksum); `damaged`: the
// file changed after the manifest was written.
std::string write_checkpoint(const std::string& run_dir, int step, bool damaged = false,
                             const std::string& fp32_gemm = "", const std::string& precision = "") {
  char name[32];
  std::snprintf(name, sizeof name, "step_%08d", step);
  const std::string ck = joule::test::write_checkpoint_dir(
      run_dir + "/checkpoints/" + name, {{"trainer_state.json", trainer_state(step, fp32_gemm, precision)}});
  if (damaged)  // the same size
    joule::test::write_file(ck + "/trainer_state.json", trainer_state(step + 1, fp32_gemm, precision));
  return ck;
}

std::string start_error(const std::string& run_dir, const std::string& resume) {
  try {
    joule::trainer::choose_start_on_root(run_dir, resume);
  } catch (const joule::Error& e) {
    return e.what();
  }
  return "no error";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// Where a run starts: every choice rank 0 makes before anything is loaded.
TEST(RunSetup, ChoosesWhereToStart) {
  joule::test::TempDir dir;
  const std::string run = dir.file("run");
  // Fresh: nothing to load, in a new directory and in one without checkpoints.
  EXPECT_FALSE(joule::trainer::choose_start_on_root(run, "").checkpoint);
  EXPECT_FALSE(joule::trainer::choose_start_on_root(run, "auto").checkpoint);
  EXPECT_EQ(joule::trainer::choose_start_on_root(run, "auto").fp32_gemm, "");  // nothing to keep
  write_checkpoint(run, 2);
  const std::string newest = write_checkpoint(run, 4, false, "onednn");
  // Fresh where checkpoints exist would overwrite them.
  EXPECT_TRUE(contains(start_error(run, ""), "already holds checkpoints: pass --resume auto")) << start_error(run, "");
  // auto: the newest that verifies, with its manifest's checksum for the other ranks.
  joule::trainer::StartPoint s = joule::trainer::choose_start_on_root(run, "auto");
  ASSERT_TRUE(s.checkpoint);
  EXPECT_EQ(*s.checkpoint, newest);
  EXPECT_EQ(s.manifest_checksum, joule::hex64(joule::fnv1a64_file(newest + "/manifest.json")));
  EXPECT_TRUE(s.warnings.empty());
  // With the fp32 GEMM library it ran, for a resume with train.fp32_gemm = auto to keep; a checkpoint of a joule
  // before the record ran the BLAS.
  EXPECT_EQ(s.fp32_gemm, "onednn");
  EXPECT_EQ(joule::trainer::choose_start_on_root(run, run + "/checkpoints/step_00000002").fp32_gemm, "blas");
  write_checkpoint(dir.file("odd"), 5, false, "mkl");  // a value no joule writes: refused
  EXPECT_TRUE(contains(start_error(dir.file("odd"), "auto"), "trainer_state.json: fp32_gemm is \"mkl\""))
      << start_error(dir.file("odd"), "auto");
  // A bf16 run has no fp32 GEMMs to keep; a GPU's are its own.
  write_checkpoint(dir.file("bf16"), 5, false, "onednn", "bf16");
  EXPECT_EQ(joule::trainer::choose_start_on_root(dir.file("bf16"), "auto").fp32_gemm, "");
  write_checkpoint(dir.file("gpu"), 5, false, "cuda", "fp32");
  EXPECT_EQ(joule::trainer::choose_start_on_root(dir.file("gpu"), "auto").fp32_gemm, "cuda");
  // A damaged newer one is skipped with a warning; a directory of the user's is left alone, said so.
  write_checkpoint(run, 6, /*damaged=*/true);
  std::filesystem::create_directories(run + "/checkpoints/best");
  s = joule::trainer::choose_start_on_root(run, "auto");
  ASSERT_TRUE(s.checkpoint);
  EXPECT_EQ(*s.checkpoint, newest);
  ASSERT_EQ(s.warnings.size(), 2u);
  EXPECT_TRUE(contains(s.warnings[0], "step_00000006")) << s.warnings[0];
  EXPECT_TRUE(contains(s.warnings[1], "best: not a name joule gives a checkpoint")) << s.warnings[1];
  // A named checkpoint is taken when it verifies, refused with the reason when not.
  EXPECT_EQ(*joule::trainer::choose_start_on_root(run, run + "/checkpoints/step_00000002").checkpoint,
            run + "/checkpoints/step_00000002");
  EXPECT_TRUE(contains(start_error(run, run + "/checkpoints/step_00000006"), "checksum"))
      << start_error(run, run + "/checkpoints/step_00000006");
  EXPECT_TRUE(contains(start_error(run, dir.file("absent")), ": no such directory"));
  EXPECT_TRUE(contains(start_error(run, run), ": a run directory, not a checkpoint"));
  EXPECT_TRUE(contains(start_error(run, "AUTO"), "did you mean --resume auto"));
  // Checkpoints of which none verifies are not a fresh start: it would overwrite them.
  const std::string broken = dir.file("broken");
  write_checkpoint(broken, 3, /*damaged=*/true);
  EXPECT_TRUE(contains(start_error(broken, "auto"), "--resume auto found checkpoints but none verifies"))
      << start_error(broken, "auto");
}

// The step's sums stay on the device and are read once per logging interval: the figures must be exactly those of
// reading every batch's losses and counts on the host and adding them there, as the trainer did before.
TEST(DeviceSums, ReadOnceEqualsAddingEveryBatchOnTheHost) {
  const joule::models::BertConfig config = joule::test::small_bert(211, 48, 3, 96, 64, 0.0);
  joule::models::BertForPreTraining model(config, 7);
  joule::trainer::DeviceSums device, interval;
  joule::trainer::BatchSums host;
  for (uint64_t seed = 1; seed <= 5; ++seed) {
    const joule::models::PretrainingBatch batch =
        joule::models::synthetic_batch(config, 3 + static_cast<int64_t>(seed), 32, 5, seed);
    const joule::models::PretrainingOutput out = model->forward(batch);
    device.add(out, batch.input_ids.size(0));
    host.mlm_loss += out.mlm_loss.item<double>();
    host.nsp_loss += out.nsp_loss.item<double>();
    host.mlm_correct += static_cast<double>(out.mlm_correct.item<int64_t>());
    host.nsp_correct += static_cast<double>(out.nsp_correct.item<int64_t>());
    host.mlm_predictions += static_cast<double>(out.mlm_predictions);
    host.sequences += static_cast<double>(batch.input_ids.size(0));
    host.batches += 1;
    host.mlm_loss_total += out.mlm_loss.item<double>() * static_cast<double>(out.mlm_predictions);
    host.nsp_loss_total += out.nsp_loss.item<double>() * static_cast<double>(batch.input_ids.size(0));
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
  EXPECT_EQ(read.mlm_loss_total, host.mlm_loss_total);
  EXPECT_EQ(read.nsp_loss_total, host.nsp_loss_total);
  EXPECT_GT(read.mlm_correct + read.nsp_correct, 0);  // the counts arrived, not zeros
  const joule::trainer::BatchSums empty = joule::trainer::DeviceSums{}.read();
  EXPECT_EQ(empty.batches, 0);
  EXPECT_EQ(empty.mlm_loss, 0);
}

// An evaluation's loss is the mean over every masked prediction (MLM) and every sequence (NSP), so the same model on
// the same data gives the same figures at any batch size and over any number of ranks. The rows here have 1 to 4
// masked predictions each, so a mean of batch means would differ from one batch size to the next.
TEST(Evaluator, FiguresDoNotDependOnTheBatchSizeOrTheRanks) {
  joule::test::TempDir dir;
  joule::data::HostBatch b;
  const int64_t rows = 23, seq = 16, max_pred = 4;
  b.resize(rows, seq, max_pred);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t real = 8 + r % 7, predictions = 1 + r % 4;
    for (int64_t p = 0; p < real; ++p) {
      b.input_ids[r * seq + p] = static_cast<int32_t>(5 + (r * 31 + p * 7) % 200);
      b.input_mask[r * seq + p] = 1;
      b.segment_ids[r * seq + p] = p >= real / 2 ? 1 : 0;
    }
    for (int64_t k = 0; k < predictions; ++k) {
      b.masked_positions[r * max_pred + k] = static_cast<int32_t>(1 + k);
      b.masked_ids[r * max_pred + k] = static_cast<int32_t>(5 + (r * 13 + k * 3) % 200);
    }
    b.next_sentence_labels[r] = static_cast<int32_t>(r % 2);
  }
  joule::data::write_shard(dir.file("part_00000.hdf5"), b, 8);
  const joule::data::Dataset data = joule::data::Dataset::open(dir.path());
  joule::models::BertForPreTraining model(joule::test::small_bert(211, 48, 3, 96, 64, 0.0), 7);

  const joule::trainer::EvalResult whole =
      joule::trainer::finish_eval(joule::trainer::evaluate_slice(model, data, rows, 0, 0, 1));
  EXPECT_EQ(whole.sequences, rows);
  const auto expect_same = [&](const joule::trainer::EvalResult& e, const std::string& how) {
    EXPECT_NEAR(e.mlm_loss, whole.mlm_loss, 1e-5 * whole.mlm_loss) << how;
    EXPECT_NEAR(e.nsp_loss, whole.nsp_loss, 1e-5 * whole.nsp_loss) << how;
    EXPECT_EQ(e.mlm_accuracy, whole.mlm_accuracy) << how;
    EXPECT_EQ(e.nsp_accuracy, whole.nsp_accuracy) << how;
    EXPECT_EQ(e.sequences, whole.sequences) << how;
  };
  for (int64_t batch : {1, 4, 7, 10})
    expect_same(joule::trainer::finish_eval(joule::trainer::evaluate_slice(model, data, batch, 0, 0, 1)),
                "batch " + std::to_string(batch));
  for (int world : {2, 3}) {  // each rank's slice, summed as the step boundary sums them
    joule::trainer::BatchSums all;
    for (int rank = 0; rank < world; ++rank) all.add(joule::trainer::evaluate_slice(model, data, 5, 0, rank, world));
    expect_same(joule::trainer::finish_eval(all), std::to_string(world) + " ranks");
  }
  // The old figure, a mean of batch means, does differ here: the test can tell the two apart.
  const joule::trainer::BatchSums by7 = joule::trainer::evaluate_slice(model, data, 7, 0, 0, 1);
  EXPECT_GT(std::abs(by7.mlm_loss / by7.batches - whole.mlm_loss), 1e-4 * whole.mlm_loss);
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
