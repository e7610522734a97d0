// Where `joule data create` builds a data set: OUT.partial, locked while a run writes it, with progress.json listing
// each completed chunk's shards (sequence count, size, checksum) and the arguments that made them; renamed to OUT
// only when complete. A rerun with the same arguments keeps the verified shards and continues after them. No LibTorch.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launch/util/file_io.h"

namespace joule::data {

// OUT when it already holds a complete data set: its metadata.json if made with `arguments` (nothing to do). Else
// returns null when OUT is absent or empty, or when `replace`; otherwise UsageError naming what differs.
// `command` names the command in its errors.
nlohmann::json existing_data_set(const std::string& out, const nlohmann::json& arguments, bool replace,
                                 const std::string& command = "data create");

class PartialDataSet {
 public:
  // Locks OUT.partial (IoError when another run holds it) and keeps the chunks an earlier run with the same
  // `arguments` completed, their shards verified; files not listed (a killed run's half-written shard) are removed.
  // A partial data set of other arguments is refused (UsageError naming the difference) unless `replace`.
  PartialDataSet(std::string out, nlohmann::json arguments, bool replace, std::string command = "data create");
  ~PartialDataSet();  // removes OUT.partial when this run made it and completed no chunk (nothing to resume)
  PartialDataSet(const PartialDataSet&) = delete;
  PartialDataSet& operator=(const PartialDataSet&) = delete;

  const std::string& dir() const { return dir_; }
  std::string shard_path(const std::string& split, int64_t index) const;  // under dir(), e.g. train/part_00003.hdf5
  const nlohmann::json& chunks() const { return progress_["chunks"]; }    // one record per completed chunk
  size_t resumed_chunks() const { return resumed_; }
  // What an earlier run's progress.json could not give (damaged JSON, a record without its keys): said to the user,
  // whose rerun then makes that work again.
  const std::vector<std::string>& notes() const { return notes_; }

  // A shard's record for a chunk's progress entry: file (relative), sequences, bytes, fnv1a64 checksum.
  nlohmann::json shard_record(const std::string& split, int64_t index, int64_t sequences) const;
  void record_chunk(nlohmann::json record);  // appended to progress.json, written atomically
  // Writes metadata.json and moves the data set to OUT (an OUT holding another data set is moved aside and removed).
  void finish(const nlohmann::json& metadata);

 private:
  void verify_and_keep(const nlohmann::json& earlier);
  void save_progress() const;

  std::string out_, dir_, command_;
  nlohmann::json arguments_, progress_;
  std::optional<FileLock> lock_;  // held from construction to the rename into place
  size_t resumed_ = 0;
  bool created_ = false;  // OUT.partial did not exist before this run
  std::vector<std::string> notes_;
};

// "seed: 9 here, 12345 there; seq_len: ..." for the arguments that differ between two argument objects.
std::string argument_differences(const nlohmann::json& ours, const nlohmann::json& theirs);

}  // namespace joule::data
