// The data record of a run (trainer/data_record.h): what a resume compares and how --accept-data-change records a new
// data segment.
#include <gtest/gtest.h>

#include <filesystem>
#include <functional>

#include <nlohmann/json.hpp>

#include "data/dataset.h"
#include "data/shard.h"
#include "test_util.h"
#include "tests/support/shard_variants.h"
#include "trainer/data_record.h"

using joule::data::Dataset;
using joule::test::small_batch;
using joule::test::TempDir;
using joule::trainer::DataChangedError;
using joule::trainer::resume_data_record;

namespace {

std::string error_of(const std::function<void()>& call) {
  try {
    call();
  } catch (const DataChangedError& e) {
    return e.what();
  }
  return "";
}

class DataRecordTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::filesystem::create_directories(dir_.file("train"));
    std::filesystem::create_directories(dir_.file("eval"));
    joule::data::write_shard(dir_.file("train/a.hdf5"), small_batch(5));
    joule::data::write_shard(dir_.file("train/b.hdf5"), small_batch(7));
    joule::data::write_shard(dir_.file("eval/e.hdf5"), small_batch(4, 8, 3, 20));
  }
  Dataset open(const std::string& name) { return Dataset::open(dir_.file(name)); }
  TempDir dir_;
};

}  // namespace

TEST_F(DataRecordTest, AResumeOnTheSameDataKeepsTheRecord) {
  const Dataset train = open("train"), eval = open("eval");
  const std::string record = joule::trainer::new_data_record({train, &eval});
  EXPECT_TRUE(joule::trainer::data_segment_notes(record).empty());  // one segment: nothing to note
  const auto segment = nlohmann::json::parse(record)["segments"][0];
  EXPECT_EQ(segment["from_step"], 0);
  EXPECT_EQ(segment["train"]["digest"], train.digest());
  EXPECT_EQ(segment["train"]["sequences"], 12);
  EXPECT_EQ(segment["eval"]["digest"], eval.digest());

  const auto resumed = resume_data_record(record, "ck", 10, {open("train"), &eval}, false);
  EXPECT_EQ(resumed.record, record);
  EXPECT_TRUE(resumed.resume_notes.empty());
}

TEST_F(DataRecordTest, OtherTrainingOrEvalDataStopsTheResumeNamingTheShard) {
  const Dataset train = open("train"), eval = open("eval");
  const std::string record = joule::trainer::new_data_record({train, &eval});
  joule::data::write_shard(dir_.file("train/b.hdf5"), small_batch(7, 8, 3, 12));  // same shape, other tokens
  const Dataset edited = open("train");
  std::string e = error_of([&] { resume_data_record(record, "RUN/checkpoints/step_10", 10, {edited, &eval}, false); });
  EXPECT_NE(e.find("resuming from RUN/checkpoints/step_10: the data is not what the run trained on"), std::string::npos)
      << e;
  EXPECT_NE(e.find("training data"), std::string::npos) << e;
  EXPECT_NE(e.find("changed: b.hdf5"), std::string::npos) << e;

  joule::data::write_shard(dir_.file("eval/f.hdf5"), small_batch(4, 8, 3, 30));
  const Dataset more_eval = open("eval");
  e = error_of([&] { resume_data_record(record, "ck", 10, {train, &more_eval}, false); });
  EXPECT_NE(e.find("eval data"), std::string::npos) << e;
  EXPECT_NE(e.find("added: f.hdf5"), std::string::npos) << e;
}

TEST_F(DataRecordTest, AnAcceptedChangeIsANewSegmentFromTheResumedStep) {
  const Dataset train = open("train"), eval = open("eval");
  const std::string record = joule::trainer::new_data_record({train, &eval});
  joule::data::write_shard(dir_.file("train/c.hdf5"), small_batch(9));
  const Dataset grown = open("train");
  const auto accepted = resume_data_record(record, "ck", 10, {grown, &eval}, true);
  EXPECT_EQ(joule::trainer::data_segment_notes(accepted.record).size(), 1u);  // the second segment
  ASSERT_EQ(accepted.resume_notes.size(), 1u);
  EXPECT_NE(accepted.resume_notes[0].find("data segment 2 starts at step 10 (--accept-data-change): training data"),
            std::string::npos)
      << accepted.resume_notes[0];
  const auto segments = nlohmann::json::parse(accepted.record)["segments"];
  EXPECT_EQ(segments[0]["train"]["digest"], train.digest());
  EXPECT_EQ(segments[1]["from_step"], 10);
  EXPECT_EQ(segments[1]["train"]["sequences"], 21);
  const std::vector<std::string> notes = joule::trainer::data_segment_notes(accepted.record);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("data segment 2 from step 10 (--accept-data-change): training data "), std::string::npos)
      << notes[0];
  EXPECT_NE(notes[0].find(", 3 shard(s), 21 sequences, digest " + grown.digest()), std::string::npos) << notes[0];
  EXPECT_TRUE(joule::trainer::data_segment_notes(record).empty());
  // The next resume compares with the new segment: the grown data set goes on without a flag, the old one does not.
  EXPECT_EQ(resume_data_record(accepted.record, "ck", 20, {grown, &eval}, false).record, accepted.record);
  EXPECT_NE(error_of([&] { resume_data_record(accepted.record, "ck", 20, {train, &eval}, false); }), "");
}

TEST_F(DataRecordTest, ACheckpointWithoutARecordStartsOneWithANote) {
  const Dataset train = open("train");
  const auto resumed = resume_data_record("", "RUN/checkpoints/step_5", 5, {train, nullptr}, false);
  ASSERT_EQ(resumed.resume_notes.size(), 1u);
  EXPECT_NE(resumed.resume_notes[0].find("RUN/checkpoints/step_5 records no data set"), std::string::npos);
  EXPECT_EQ(nlohmann::json::parse(resumed.record)["segments"][0]["from_step"], 5);
}

TEST_F(DataRecordTest, AnotherShuffleOrderStopsTheResumeUnlessAccepted) {
  // A checkpoint of a joule before the block shuffle records no order: its order was one of single sequences. Each
  // small shard is one chunk (5 and 7 rows): the blocks take the larger.
  const Dataset train = open("train"), eval = open("eval");
  EXPECT_EQ(train.block_layout().order_name(), "blocks of 7 rows");
  nlohmann::json old = nlohmann::json::parse(joule::trainer::new_data_record({train, &eval}));
  EXPECT_EQ(old["segments"][0]["train"]["order"], "blocks of 7 rows");
  old["segments"][0]["train"].erase("order");
  const std::string e = error_of([&] { resume_data_record(old.dump(), "ck", 4, {train, &eval}, false); });
  EXPECT_NE(e.find("the global shuffle orders the training data in blocks of 7 rows where the run read it in blocks of "
                   "1 row"),
            std::string::npos)
      << e;
  const auto accepted = resume_data_record(old.dump(), "ck", 4, {train, &eval}, true);
  const auto segments = nlohmann::json::parse(accepted.record)["segments"];
  ASSERT_EQ(segments.size(), 2u);
  EXPECT_EQ(segments[1]["train"]["order"], "blocks of 7 rows");
  EXPECT_EQ(segments[1]["from_step"], 4);
}
