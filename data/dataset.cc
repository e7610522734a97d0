#include "data/dataset.h"
#include "launch/util/error.h"
#include "launch/util/file_io.h"
#include "launch/util/hash.h"

#include <glob.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>

#include <nlohmann/json.hpp>

namespace joule::data {
namespace fs = std::filesystem;

namespace {

bool shard_name(const fs::path& p) { return p.extension() == ".hdf5" || p.extension() == ".h5"; }

// A shard that was named, listed or found is read or the run stops: one that is a dangling symbolic link, not a
// regular file or unreadable is an error naming it, never skipped (the data set would silently shrink).
void check_shard_file(const std::string& path, const std::string& found_in) {
  std::error_code ec;
  const fs::file_status target = fs::status(path, ec);
  std::string why;
  if (target.type() == fs::file_type::not_found)
    why = fs::is_symlink(fs::symlink_status(path, ec)) ? "a symbolic link to nothing" : "not there (removed?)";
  else if (target.type() != fs::file_type::regular)
    why = "not a regular file";
  else if (::access(path.c_str(), R_OK) != 0)
    why = std::string("not readable (") + std::strerror(errno) + ")";
  if (!why.empty())
    throw ShardError(path + ": " + why + "; it is a shard of " + found_in + " and cannot be read",
                     "restore the shard or remove it from " + found_in + " (a data set is exactly its shards)");
}

std::vector<std::string> list_shards(const std::string& spec, std::string* cache_dir) {
  std::vector<std::string> paths;
  std::error_code ec;
  const auto unlistable = [&](const std::string& what, const std::string& cause) {
    throw ShardError(what + ": cannot list the shards: " + cause,
                     "check the directory's permissions (and that its file system is mounted)");
  };
  if (fs::is_directory(spec, ec)) {
    fs::directory_iterator it(spec, ec), end;
    if (ec) unlistable(spec, ec.message());
    for (; it != end; it.increment(ec)) {
      if (ec) unlistable(spec, ec.message());
      if (!shard_name(it->path())) continue;
      check_shard_file(it->path().string(), spec);
      paths.push_back(it->path().string());
    }
    if (ec) unlistable(spec, ec.message());
    *cache_dir = spec;
  } else if (spec.find_first_of("*?[") != std::string::npos && !fs::exists(spec, ec)) {
    glob_t g{};
    const int found = glob(spec.c_str(), GLOB_ERR, nullptr, &g);
    if (found == 0)
      for (size_t i = 0; i < g.gl_pathc; ++i) paths.push_back(g.gl_pathv[i]);
    globfree(&g);
    if (found == GLOB_ABORTED) unlistable(spec, "a directory on the way cannot be read");
    if (found == GLOB_NOSPACE) unlistable(spec, "out of memory");
    for (const std::string& p : paths) check_shard_file(p, spec);
    if (!paths.empty()) *cache_dir = fs::path(paths.front()).parent_path().string();
  } else if (fs::is_regular_file(spec, ec) && !shard_name(spec)) {
    // A list file: one shard path per line ('#' comments), relative to the list's directory.
    std::ifstream in(spec);
    if (!in) throw ShardError(spec + ": cannot read the shard list: " + std::strerror(errno));
    std::string line;
    const fs::path base = fs::path(spec).parent_path();
    for (int number = 1; std::getline(in, line); ++number) {
      line.erase(line.find_last_not_of(" \t\r") + 1);
      if (line.empty() || line[0] == '#') continue;
      const std::string path = fs::path(line).is_absolute() ? line : (base / line).string();
      if (!fs::is_regular_file(path))
        throw ShardError(spec + ":" + std::to_string(number) + ": listed shard '" + line +
                         "' does not exist (a shard list names one .hdf5 file per line)");
      paths.push_back(path);
    }
    if (in.bad()) throw ShardError(spec + ": reading the shard list failed part-way: " + std::strerror(errno));
    *cache_dir = base.string();
  } else if (fs::is_regular_file(spec, ec)) {
    paths.push_back(spec);
    *cache_dir = fs::path(spec).parent_path().string();
  } else {
    throw ShardError(spec + ": no such shard directory, file, list or matching glob");
  }
  std::sort(paths.begin(), paths.end());
  if (paths.empty()) throw ShardError(spec + ": no shards (*.hdf5, *.h5) found");
  return paths;
}

// A cheap content fingerprint of a shard: FNV-1a-64 of its first and last 64 KiB. Size and modification time alone
// do not prove that a cached validation still applies (a shard replaced by a copy keeping both would be trusted).
std::string content_fingerprint(const std::string& path, uint64_t bytes) {
  constexpr uint64_t kBlock = 64 * 1024;
  try {
    joule::Fnv1a64 h;
    joule::add_file(h, path, 0, std::min(bytes, kBlock));
    if (bytes > kBlock) {
      const uint64_t tail = std::min(bytes - kBlock, kBlock);
      joule::add_file(h, path, bytes - tail, tail);
    }
    return joule::hex64(h.value());
  } catch (const joule::IoError&) {
    throw ShardError(path + ": cannot open shard");
  }
}

// metadata.json of a `joule data create` output, when `spec` is its train/ or eval/ directory: the shard count and
// sequences it recorded must be what the directory holds (a rerun into the same --out once left extra shards).
void check_against_metadata(const std::string& spec, size_t shards, int64_t sequences) {
  const fs::path dir = fs::path(spec).lexically_normal();
  const std::string split = dir.filename().empty() ? dir.parent_path().filename().string() : dir.filename().string();
  const fs::path meta_path = (dir.filename().empty() ? dir.parent_path() : dir).parent_path() / "metadata.json";
  std::error_code ec;
  if ((split != "train" && split != "eval") || !fs::is_directory(dir, ec) || !fs::exists(meta_path, ec)) return;
  nlohmann::json meta;
  try {
    std::ifstream in(meta_path);
    meta = nlohmann::json::parse(in);
  } catch (const std::exception&) {
    throw ShardError(meta_path.string() + ": not valid JSON",
                     "the data set's metadata is damaged: run `joule data create --replace` again");
  }
  if (!meta.is_object() || meta.value("format", "") != "joule-pretraining-data") return;
  const int64_t want_shards = split == "train" ? meta.value("train_shards", int64_t{-1}) : 1;
  const int64_t want_sequences = meta.value(split + "_sequences", int64_t{-1});
  if ((want_shards >= 0 && static_cast<int64_t>(shards) != want_shards) ||
      (want_sequences >= 0 && sequences != want_sequences))
    throw ShardError(dir.string() + ": holds " + std::to_string(shards) + " shard(s) of " + std::to_string(sequences) +
                         " sequences, but " + meta_path.string() + " records " + std::to_string(want_shards) + " of " +
                         std::to_string(want_sequences) + ": files of two data sets are mixed",
                     "recreate the data set into a new directory (or `joule data create --replace`), or remove the "
                     "files that do not "
                     "belong to it");
}

nlohmann::json stats_json(const ShardEntry& e) {
  const ShardStats& s = e.stats;
  return {{"bytes", e.bytes},
          {"mtime_ns", e.mtime_ns},
          {"fingerprint", e.fingerprint},
          {"sequences", s.sequences},
          {"seq_len", s.seq_len},
          {"max_predictions", s.max_predictions},
          {"int64_layout", s.int64_layout},
          {"max_token_id", s.max_token_id},
          {"masked_predictions", s.masked_predictions},
          {"real_tokens", s.real_tokens}};
}

}  // namespace

Dataset Dataset::open(const std::string& spec, const DatasetOptions& options) {
  Dataset d;
  std::string cache_dir;
  const std::vector<std::string> paths = list_shards(spec, &cache_dir);
  d.cache_path_ = (fs::path(cache_dir.empty() ? "." : cache_dir) / ".joule-index.json").string();

  nlohmann::json cache = nlohmann::json::object();
  if (options.use_cache && fs::exists(d.cache_path_)) {
    try {
      std::ifstream in(d.cache_path_);
      cache = nlohmann::json::parse(in);
      if (!cache.is_object() || cache.value("format_version", 0) != 1) cache = nlohmann::json::object();
    } catch (const std::exception&) {
      cache = nlohmann::json::object();  // a damaged cache only costs a revalidation
    }
  }
  nlohmann::json& entries = cache["shards"];
  if (!entries.is_object()) entries = nlohmann::json::object();

  for (const std::string& path : paths) {
    ShardEntry e;
    e.path = fs::absolute(path).lexically_normal().string();
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) throw ShardError(path + ": cannot stat shard");
    e.bytes = static_cast<uint64_t>(st.st_size);
    e.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    e.fingerprint = content_fingerprint(path, e.bytes);
    const auto it = entries.find(e.path);
    if (it != entries.end() && (*it)["bytes"] == e.bytes && (*it)["mtime_ns"] == e.mtime_ns &&
        it->value("fingerprint", "") == e.fingerprint) {
      const auto& j = *it;
      e.stats.sequences = j["sequences"];
      e.stats.seq_len = j["seq_len"];
      e.stats.max_predictions = j["max_predictions"];
      e.stats.int64_layout = j["int64_layout"];
      e.stats.max_token_id = j["max_token_id"];
      e.stats.masked_predictions = j["masked_predictions"];
      e.stats.real_tokens = j["real_tokens"];
      ShardReader schema_check(path);  // cheap: the file still opens with the layout
    } else {
      e.stats = validate_shard(path);
      ++d.validated_now_;
      entries[e.path] = stats_json(e);
    }
    if (options.vocab_size > 0) check_vocab(path, e.stats, options.vocab_size);
    if (d.shards_.empty()) {
      d.seq_len_ = e.stats.seq_len;
      d.max_predictions_ = e.stats.max_predictions;
    } else if (e.stats.seq_len != d.seq_len_ || e.stats.max_predictions != d.max_predictions_) {
      throw ShardError(path + ": dataset 'input_ids'/'masked_lm_positions': sequence length " +
                       std::to_string(e.stats.seq_len) + " and max predictions " +
                       std::to_string(e.stats.max_predictions) + " differ from " + d.shards_.front().path + " (" +
                       std::to_string(d.seq_len_) + ", " + std::to_string(d.max_predictions_) +
                       "); one dataset must have one shape");
    }
    d.offsets_.push_back(d.total_);
    d.total_ += e.stats.sequences;
    d.shards_.push_back(std::move(e));
  }
  check_against_metadata(spec, d.shards_.size(), d.total_);

  if (options.use_cache && d.validated_now_ > 0) {
    cache["format_version"] = 1;
    try {
      write_file_atomically(d.cache_path_, cache.dump(1) + "\n");
    } catch (const joule::IoError& e) {
      std::cerr << "joule: note: cannot write the shard index cache (" << e.what()
                << "); shards will be validated again next time\n";
    }
  }
  return d;
}

std::pair<size_t, int64_t> Dataset::locate(int64_t id) const {
  if (id < 0 || id >= total_)
    throw joule::InternalError("sequence id " + std::to_string(id) + " outside the dataset's " +
                               std::to_string(total_));
  const size_t shard =
      static_cast<size_t>(std::upper_bound(offsets_.begin(), offsets_.end(), id) - offsets_.begin()) - 1;
  return {shard, id - offsets_[shard]};
}

std::string find_vocab_beside(const std::string& spec) {
  fs::path p(spec);
  fs::path dir = fs::is_directory(p) ? p : p.parent_path();
  for (const fs::path& candidate : {dir / "vocab.txt", dir.parent_path() / "vocab.txt"})
    if (fs::exists(candidate)) return candidate.string();
  return "";
}

}  // namespace joule::data
