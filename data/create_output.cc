#include "data/create_output.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "launch/util/error.h"
#include "launch/util/file_io.h"
#include "launch/util/hash.h"
#include "launch/util/json_field.h"

namespace joule::data {
namespace fs = std::filesystem;

namespace {

constexpr const char* kProgress = "progress.json";
constexpr const char* kLock = ".lock";

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  if (!in) return nullptr;
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception&) {
    return nullptr;
  }
}

bool empty_or_absent(const std::string& dir) {
  std::error_code ec;
  return !fs::exists(dir, ec) || (fs::is_directory(dir, ec) && fs::is_empty(dir, ec));
}

}  // namespace

std::string argument_differences(const nlohmann::json& ours, const nlohmann::json& theirs) {
  std::string out;
  for (const auto& [key, value] : ours.items()) {
    const auto it = theirs.find(key);
    const std::string there = it == theirs.end() ? "absent" : it->dump();
    if (it != theirs.end() && *it == value) continue;
    std::string here = value.dump(), other = there;
    if (here.size() > 80) here = here.substr(0, 77) + "...";
    if (other.size() > 80) other = other.substr(0, 77) + "...";
    out += (out.empty() ? "" : "; ") + key + ": " + here + " now, " + other + " there";
  }
  for (const auto& [key, value] : theirs.items())
    if (!ours.contains(key)) out += (out.empty() ? "" : "; ") + key + ": absent now, " + value.dump() + " there";
  return out;
}

nlohmann::json existing_data_set(const std::string& out, const nlohmann::json& arguments, bool replace,
                                 const std::string& command) {
  std::error_code ec;
  // OUT is made as OUT.partial and renamed into place: onto a symbolic link, that would replace the link (and leave
  // what it points to as it was).
  std::string link = out;
  while (link.size() > 1 && link.back() == '/') link.pop_back();
  if (fs::is_symlink(link, ec))
    throw joule::UsageError(command + ": --out " + out + " is a symbolic link (to " +
                                fs::read_symlink(link, ec).string() +
                                "); the data set is built beside it and renamed into place, which would replace "
                                "the link",
                            "give the directory it points to as --out");
  if (empty_or_absent(out)) return nullptr;
  if (!fs::is_directory(out, ec))
    throw joule::UsageError(command + ": --out " + out + " exists and is not a directory");
  const nlohmann::json meta = read_json((fs::path(out) / "metadata.json").string());
  const bool ours =
      meta.is_object() && meta.value("format", "") == "joule-pretraining-data" && meta.contains("arguments");
  if (ours && meta["arguments"] == arguments) return meta;
  if (replace) return nullptr;
  std::string what;
  if (ours) {
    what = "holds a data set made with other arguments (" + argument_differences(arguments, meta["arguments"]) + ")";
  } else {
    std::string entries;
    int count = 0;
    for (const auto& e : fs::directory_iterator(out, ec))
      if (count++ < 4) entries += (entries.empty() ? "" : ", ") + e.path().filename().string();
    what = "is not empty (" + std::to_string(count) + " entries: " + entries + (count > 4 ? ", ..." : "") + ")";
  }
  throw joule::UsageError(
      command + ": --out " + out + " " + what + "; writing into it would mix two data sets",
      "choose a new or empty directory, or pass --replace to replace it (the new data set is built in " + out +
          ".partial and swapped in when complete)");
}

PartialDataSet::PartialDataSet(std::string out, nlohmann::json arguments, bool replace, std::string command)
    : out_(std::move(out)), dir_(out_ + ".partial"), command_(std::move(command)), arguments_(std::move(arguments)) {
  std::error_code ec;
  created_ = !fs::exists(dir_, ec);
  fs::create_directories(dir_, ec);
  if (ec) throw_write_error(dir_, "creating the directory", ec.value());
  const std::string lock = (fs::path(dir_) / kLock).string();
  lock_ = FileLock::try_acquire(lock);
  if (!lock_)
    throw joule::IoError(command_ + ": another `joule " + command_ + "` is writing " + dir_,
                         "wait for it to finish, or give this one another --out");
  const std::string progress_path = (fs::path(dir_) / kProgress).string();
  const nlohmann::json earlier = read_json(progress_path);
  std::error_code exists_ec;
  if (fs::exists(progress_path, exists_ec) && !earlier.is_object())
    notes_.push_back(progress_path + " is damaged (not a JSON object): the earlier run's shards are made again");
  else if (earlier.is_object() && (!earlier.contains("arguments") || !earlier.contains("chunks")))
    notes_.push_back(progress_path + " lacks '" + (earlier.contains("arguments") ? "chunks" : "arguments") +
                     "' (damaged): the earlier run's shards are made again");
  const bool same = earlier.is_object() && earlier.contains("arguments") && earlier["arguments"] == arguments_;
  const bool has_work =
      earlier.is_object() && earlier.contains("chunks") && earlier["chunks"].is_array() && !earlier["chunks"].empty();
  if (!same && has_work && earlier.contains("arguments") && !replace)
    throw joule::UsageError(command_ + ": " + dir_ + " holds part of a data set made with other arguments (" +
                                argument_differences(arguments_, earlier["arguments"]) + ")",
                            "rerun with the arguments it was made with to finish it, or pass --replace to discard it");
  progress_ = {
      {"format", "joule-data-create-progress"}, {"arguments", arguments_}, {"chunks", nlohmann::json::array()}};
  if (same) verify_and_keep(earlier);
  // Everything else here is a killed run's unfinished work, a discarded partial data set, or one that had not
  // completed a shard (nothing to keep): removed.
  std::set<std::string> keep = {kLock, kProgress};
  for (const auto& c : chunks())
    for (const char* split : {"train", "eval"})
      if (c.contains(split)) keep.insert(c[split]["file"].get<std::string>());
  for (auto it = fs::recursive_directory_iterator(dir_, ec); !ec && it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    const std::string rel = fs::relative(it->path(), dir_, ec).string();
    if (it->is_regular_file(ec) && !keep.count(rel)) fs::remove(it->path(), ec);
  }
  fs::create_directories(fs::path(dir_) / "train", ec);
  save_progress();
}

// Keeps the earlier run's chunks up to the first whose shards are missing, of another size, or fail their checksum.
// A damaged record ends what is kept like a damaged shard: the directory is this tool's own, and what is not kept is
// made again.
void PartialDataSet::verify_and_keep(const nlohmann::json& earlier) {
  const std::string where = (fs::path(dir_) / kProgress).string();
  try {
    for (const auto& c : json_field<nlohmann::json>(earlier, "chunks", where)) {
      bool intact = json_field<int64_t>(c, "index", where) == static_cast<int64_t>(progress_["chunks"].size());
      for (const char* split : {"train", "eval"}) {
        if (!c.contains(split)) continue;
        const nlohmann::json& s = c[split];
        const std::string path = path_inside(dir_, json_field<std::string>(s, "file", where), where);
        json_field<int64_t>(s, "sequences", where);  // what the summary adds up: a record without it is not kept
        const uint64_t bytes = json_field<uint64_t>(s, "bytes", where);
        const std::string checksum = json_field<std::string>(s, "fnv1a64", where);
        intact = intact && listed_file_problem(path, bytes, checksum, where).empty();
      }
      if (!intact) break;
      progress_["chunks"].push_back(c);
    }
  } catch (const joule::Error& e) {  // JsonFileError: a record without its keys; IoError: an entry that leads out of
    // the directory, or a shard that cannot be read. What is not kept is made again.
    notes_.push_back(std::string(e.what()) + ": chunk " + std::to_string(progress_["chunks"].size()) +
                     " and those after it are made again");
  }
  resumed_ = progress_["chunks"].size();
}

std::string PartialDataSet::shard_path(const std::string& split, int64_t index) const {
  char name[64];
  std::snprintf(name, sizeof name, "part_%05lld.hdf5", static_cast<long long>(index));
  return (fs::path(dir_) / split / name).string();
}

nlohmann::json PartialDataSet::shard_record(const std::string& split, int64_t index, int64_t sequences) const {
  const std::string path = shard_path(split, index);
  return {{"file", fs::relative(path, dir_).string()},
          {"sequences", sequences},
          {"bytes", fs::file_size(path)},
          {"fnv1a64", joule::hex64(joule::fnv1a64_file(path))}};
}

void PartialDataSet::record_chunk(nlohmann::json record) {
  progress_["chunks"].push_back(std::move(record));
  save_progress();
}

void PartialDataSet::save_progress() const {
  write_file_atomically((fs::path(dir_) / kProgress).string(), progress_.dump(1) + "\n");
}

PartialDataSet::~PartialDataSet() {
  // A run that made OUT.partial and failed before completing a chunk (an input without text, a full disk at the first
  // shard) leaves nothing behind: there is nothing in it to resume. (The lock is released after the removal.)
  std::error_code ec;
  if (lock_ && created_ && progress_["chunks"].empty()) fs::remove_all(dir_, ec);
}

void PartialDataSet::finish(const nlohmann::json& metadata) {
  write_file_atomically((fs::path(dir_) / "metadata.json").string(), metadata.dump(2) + "\n");
  std::error_code ec;
  fs::remove(fs::path(dir_) / kProgress, ec);
  fs::remove(fs::path(dir_) / kLock, ec);  // still held (the descriptor stays open) until the rename is done
  const std::string old = out_ + ".old-" + std::to_string(::getpid());
  const bool had_old = fs::exists(out_, ec);
  if (had_old) rename_durably(out_, old);
  rename_durably(dir_, out_);
  if (had_old) fs::remove_all(old, ec);
  lock_.reset();
}

}  // namespace joule::data
