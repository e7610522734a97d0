// TensorBoard's event files as joule writes them (trainer/tensorboard.h): the TFRecord framing and its CRC32C, what
// a resumed run keeps of an earlier segment's file, and a torn or damaged file. tools/check/tb_events.py reads a
// real run's files with TensorBoard's own reader.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "test_util.h"
#include "trainer/tensorboard.h"

namespace {

namespace fs = std::filesystem;
using joule::trainer::event_step;
using joule::trainer::read_tfrecords;
using joule::trainer::TensorBoardLog;

std::vector<std::string> event_files(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<int64_t> steps_of(const std::string& file) {
  std::vector<int64_t> out;
  for (const std::string& r : read_tfrecords(file)) out.push_back(event_step(r));
  return out;
}

}  // namespace

TEST(TensorBoard, Crc32cAndTheRecordFraming) {
  EXPECT_EQ(joule::trainer::crc32c("123456789"), 0xE3069283u);  // the CRC-32C check value (RFC 3720, B.4)
  EXPECT_EQ(joule::trainer::crc32c(""), 0u);
  const std::string record = joule::trainer::tfrecord("abc");
  ASSERT_EQ(record.size(), 8u + 4 + 3 + 4);
  EXPECT_EQ(record.substr(0, 8), std::string("\x03\0\0\0\0\0\0\0", 8));  // little-endian length
  EXPECT_EQ(record.substr(12, 3), "abc");
  EXPECT_EQ(event_step(joule::trainer::scalars_event(1.5, 300, {{"train/loss", 2.5}})), 300);
  EXPECT_EQ(event_step(joule::trainer::file_version_event(1.5)), 0);
}

TEST(TensorBoard, AResumedRunDropsTheEarlierSegmentsEventsAfterItsStep) {
  joule::test::TempDir run;
  const std::string dir = run.path() + "/tb";
  {
    TensorBoardLog first(dir, 0);
    for (int64_t step : {10, 20, 30}) first.scalars(step, {{"train/loss", 1.0 / step}});
  }
  ASSERT_EQ(event_files(dir).size(), 1u);
  EXPECT_EQ(steps_of(event_files(dir)[0]), (std::vector<int64_t>{0, 10, 20, 30}));
  // Resumed from the checkpoint of step 20: step 30 is trained (and logged) again.
  const std::string first_file = event_files(dir)[0];
  TensorBoardLog second(dir, 20);
  EXPECT_EQ(second.dropped_events(), 1);
  second.scalars(30, {{"train/loss", 0.03}});
  EXPECT_EQ(steps_of(first_file), (std::vector<int64_t>{0, 10, 20}));
  EXPECT_EQ(steps_of(second.path()), (std::vector<int64_t>{0, 30}));
}

TEST(TensorBoard, ATornLastRecordIsCutAndADamagedOneNamesTheFile) {
  joule::test::TempDir run;
  const std::string dir = run.path() + "/tb";
  std::string file;
  {
    TensorBoardLog log(dir, 0);
    log.scalars(1, {{"train/loss", 1.0}});
    file = log.path();
  }
  const std::string whole = joule::read_text_file(file);
  std::ofstream(file, std::ios::app | std::ios::binary) << joule::trainer::tfrecord("half written").substr(0, 9);
  int64_t torn = 0;
  EXPECT_EQ(read_tfrecords(file, &torn).size(), 2u);
  EXPECT_EQ(torn, 9);
  TensorBoardLog resumed(dir, 1);  // cuts the torn record away
  EXPECT_EQ(joule::read_text_file(file), whole);

  std::string damaged = whole;
  damaged[damaged.size() - 6] ^= 1;  // a byte of the last record's data
  std::ofstream(file, std::ios::trunc | std::ios::binary) << damaged;
  try {
    read_tfrecords(file);
    FAIL() << "a damaged record was read";
  } catch (const joule::IoError& e) {
    EXPECT_NE(std::string(e.what()).find(file + ": the record at byte"), std::string::npos) << e.what();
  }
}
