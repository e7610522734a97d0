#include "trainer/data_record.h"

#include <nlohmann/json.hpp>

#include "launch/util/json_field.h"

namespace joule::trainer {
namespace {

nlohmann::json set_json(const data::Dataset& d, bool shuffled) {
  nlohmann::json shards = nlohmann::json::array();
  for (const data::ShardIdentity& s : d.identity()) shards.push_back({s.name, s.bytes, s.sequences, s.checksum});
  nlohmann::json set = {{"spec", d.spec()}, {"digest", d.digest()}, {"sequences", d.size()}, {"shards", shards}};
  if (shuffled) set["order"] = d.block_layout().order_name();  // eval reads its set in order
  return set;
}

// The shuffle a recorded training set was read in: a joule before the block shuffle recorded none, and its order was
// a permutation of single sequences.
std::string recorded_order(const nlohmann::json& set) { return set.value("order", "blocks of 1 row"); }

std::vector<data::ShardIdentity> identity_of(const nlohmann::json& set, const std::string& where) {
  std::vector<data::ShardIdentity> out;
  for (const nlohmann::json& s : json_field<nlohmann::json>(set, "shards", where)) {
    if (!s.is_array() || s.size() != 4)
      throw JsonFileError(where + ": a shard entry is not [name, bytes, sequences, checksum]: " + s.dump());
    out.push_back({s[0].get<std::string>(), s[3].get<std::string>(), s[1].get<uint64_t>(), s[2].get<int64_t>()});
  }
  return out;
}

nlohmann::json segment_json(const RunData& data, int64_t from_step) {
  return {{"from_step", from_step},
          {"train", set_json(data.train, true)},
          {"eval", data.eval ? set_json(*data.eval, false) : nlohmann::json(nullptr)}};
}

// What differs between a recorded set and the one opened now ("" when nothing does).
std::string compare_set(const char* role, const nlohmann::json& recorded, const data::Dataset& now,
                        const std::string& where) {
  if (json_field<std::string>(recorded, "digest", where) == now.digest()) return "";
  return std::string(role) + " data " + now.spec() + " (recorded as " +
         json_field<std::string>(recorded, "spec", where) +
         ") differs: " + data::describe_changes(identity_of(recorded, where), now.identity());
}

}  // namespace

std::string new_data_record(const RunData& data, int64_t from_step) {
  return nlohmann::json{{"segments", nlohmann::json::array({segment_json(data, from_step)})}}.dump();
}

ResumedData resume_data_record(const std::string& recorded, const std::string& checkpoint, int64_t step,
                               const RunData& data, bool accept_change) {
  ResumedData out;
  if (recorded.empty()) {
    out.resume_notes.push_back(checkpoint + " records no data set (written by an older joule): recording " +
                               data.train.spec() + " from step " + std::to_string(step) + " on");
    out.record = new_data_record(data, step);
    return out;
  }
  const std::string where = checkpoint + "/trainer_state.json data";
  nlohmann::json record = nlohmann::json::parse(recorded);
  const nlohmann::json& segments = json_field<nlohmann::json>(record, "segments", where);
  if (!segments.is_array() || segments.empty()) throw JsonFileError(where + ": no data segments");
  const nlohmann::json& last = segments.back();
  const nlohmann::json& train = json_field<nlohmann::json>(last, "train", where);
  std::string changes = compare_set("training", train, data.train, where);
  if (const std::string order = data.train.block_layout().order_name(); recorded_order(train) != order)
    changes += (changes.empty() ? "" : "; ") + std::string("the global shuffle orders the training data in ") + order +
               " where the run read it in " + recorded_order(train) +
               " (the same epoch position means other sequences: some would be read twice this epoch, others not)";
  const bool had_eval = last.contains("eval") && !last["eval"].is_null();
  if (had_eval && data.eval)
    if (const std::string eval = compare_set("eval", last["eval"], *data.eval, where); !eval.empty())
      changes += (changes.empty() ? "" : "; ") + eval;
  if (had_eval != (data.eval != nullptr))
    out.resume_notes.push_back(std::string("the run ") + (had_eval ? "evaluated" : "did not evaluate") +
                               " before this resume and " + (data.eval ? "evaluates now" : "does not now"));
  if (changes.empty()) {
    out.record = recorded;
    return out;
  }
  if (!accept_change)
    throw DataChangedError("resuming from " + checkpoint + ": the data is not what the run trained on: " + changes);
  record["segments"].push_back(segment_json(data, step));
  out.resume_notes.push_back("data segment " + std::to_string(record["segments"].size()) + " starts at step " +
                             std::to_string(step) + " (--accept-data-change): " + changes);
  out.record = record.dump();
  return out;
}

std::vector<std::string> data_segment_notes(const std::string& record) {
  std::vector<std::string> out;
  if (record.empty()) return out;
  const nlohmann::json segments = nlohmann::json::parse(record).value("segments", nlohmann::json::array());
  for (size_t i = 1; i < segments.size(); ++i) {
    const nlohmann::json& train = segments[i]["train"];
    out.push_back("data segment " + std::to_string(i + 1) + " from step " + segments[i]["from_step"].dump() +
                  " (--accept-data-change): training data " + train.value("spec", "") + ", " +
                  std::to_string(train.value("shards", nlohmann::json::array()).size()) + " shard(s), " +
                  train["sequences"].dump() + " sequences, digest " + train.value("digest", ""));
  }
  return out;
}

}  // namespace joule::trainer
