// TensorBoard's event files, written by hand (no TensorFlow, no protobuf library): RUN/tb/ holds one file per
// segment of a run, events.out.tfevents.SECONDS.HOST.PID, each a sequence of TFRecords (length, masked CRC32C of the
// length, an Event protocol buffer, masked CRC32C of the data). The first event names the file version
// ("brain.Event:2"); each later one holds the scalars of one step (Summary.Value tag + simple_value). A resumed run
// drops, from the earlier segments' files, the events after the step it resumes from (those steps are trained again),
// so no step appears twice. Rank 0 writes. No LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "launch/util/file_io.h"

namespace joule::trainer {

using Scalars = std::vector<std::pair<std::string, double>>;  // tag ("train/loss") -> value

class TensorBoardLog {
 public:
  TensorBoardLog() = default;
  // Opens a new event file in `dir` (made if missing) for a segment that starts at `start_step`; events of earlier
  // files beyond `start_step` are dropped (each such file rewritten atomically), a torn last record too.
  TensorBoardLog(const std::string& dir, int64_t start_step);
  bool is_open() const { return fd_.valid(); }
  const std::string& path() const { return path_; }
  int64_t dropped_events() const { return dropped_; }  // from earlier files, when this one was opened
  // One event: `step`'s scalars, with the wall time now. Written with one write(2).
  void scalars(int64_t step, const Scalars& values);

 private:
  std::string path_;
  UniqueFd fd_;
  int64_t dropped_ = 0;
};

// The pieces, for tests and for reading back.
uint32_t crc32c(const std::string& bytes);
std::string tfrecord(const std::string& data);  // framed with its length and masked CRC32C checksums
std::string file_version_event(double wall_time);
std::string scalars_event(double wall_time, int64_t step, const Scalars& values);
// The records of an event file in order, up to the first that is torn (cut short); a checksum that does not match is
// an IoError naming the file and the record's offset. `torn_bytes`: how many bytes followed the last whole record.
std::vector<std::string> read_tfrecords(const std::string& path, int64_t* torn_bytes = nullptr);
// An Event's step (0 when it has none, as the file-version event).
int64_t event_step(const std::string& event);

}  // namespace joule::trainer
