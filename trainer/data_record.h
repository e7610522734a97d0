// What a run records of the data it trains and evaluates on, and how a resume compares it: data that
// changed under a run is refused unless the user accepts it as a new data segment.
//
// The record (trainer_state.json "data" in every checkpoint) is a list of data segments; each holds the identity of
// the training and eval data sets (data/dataset.h: every shard's name, size, sequences and checksum), the order the
// global shuffle reads the training set in (data/shuffle.h, "blocks of 64 rows") and the step it starts at. A fresh
// run has one segment. A resume compares the data it opened with the last segment: equal, the run goes on;
// different (shards or order), it stops with what changed, unless --accept-data-change asks for a new segment, which
// is then recorded from the resumed step. No LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "data/dataset.h"
#include "launch/util/error.h"

namespace joule::trainer {

class DataChangedError : public joule::Error {
 public:
  explicit DataChangedError(const std::string& message,
                            std::string hint =
                                "restore the data the run started with, or resume with --accept-data-change to "
                                "continue on this data as a new data segment (recorded in the checkpoints and the "
                                "run's summary)")
      : joule::Error(message, std::move(hint)) {}
};

// The data a run opened: its training set and, when it evaluates, its eval set.
struct RunData {
  const data::Dataset& train;
  const data::Dataset* eval = nullptr;
};

// A record of one segment from `from_step`: a fresh run's (step 0), or a resume from a checkpoint that records none.
std::string new_data_record(const RunData& data, int64_t from_step = 0);

struct ResumedData {
  std::string record;                     // what the resumed run's checkpoints record
  std::vector<std::string> resume_notes;  // what rank 0 says (a new data segment, a checkpoint without a record)
};

// A resume from `checkpoint` at `step`: `recorded` is the checkpoint's record ("" when an older joule wrote it).
// Throws DataChangedError naming the shards that differ, unless `accept_change`.
ResumedData resume_data_record(const std::string& recorded, const std::string& checkpoint, int64_t step,
                               const RunData& data, bool accept_change);

// One line per data segment after the first, for the run's summary: where it starts and what it trained on.
std::vector<std::string> data_segment_notes(const std::string& record);

}  // namespace joule::trainer
