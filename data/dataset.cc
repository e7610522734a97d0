#include "data/dataset.h"
#include "launch/util/error.h"
#include "launch/util/file_io.h"
#include "launch/util/hash.h"
#include "launch/util/json_field.h"

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
#include <map>

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
    throw ShardError(spec + ": no such shard directory, file, list or matching glob",
                     "give the shards: a directory (e.g. the train/ of `joule data create`, or its output directory), "
                     "a glob, a list file or one shard");
  }
  std::sort(paths.begin(), paths.end());
  if (paths.empty()) throw ShardError(spec + ": no shards (*.hdf5, *.h5) found");
  return paths;
}

// The index cache's format: version 2 added each shard's full checksum, 3 packed shards' figures (an older cache is
// validated again, once).
constexpr int kCacheVersion = 3;

// A shard's full checksum (FNV-1a-64 of every byte): what metadata.json records and what a run's data record keeps.
std::string checksum_of(const std::string& path) {
  try {
    return joule::hex64(joule::fnv1a64_file(path));
  } catch (const joule::IoError& e) {
    throw ShardError(path + ": cannot read the shard: " + e.what());
  }
}

// The modification time of `st` in nanoseconds: with the size, what says a cached validation may still apply.
int64_t mtime_ns(const struct stat& st) {
  return static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
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

// metadata.json of a `joule data create` output, when `spec` is its train/ or eval/ directory: what it recorded of
// the shards (their count, sequences and checksums) and of how they were made (vocabulary, inputs).
struct Recorded {
  CreatedBy by;
  int64_t shards = -1, sequences = -1;
  std::map<std::string, std::string> checksums;  // file name in the split's directory -> FNV-1a-64
};

std::optional<Recorded> read_metadata(const std::string& spec) {
  const fs::path dir = fs::path(spec).lexically_normal();
  const fs::path split_dir = dir.filename().empty() ? dir.parent_path() : dir;
  const std::string split = split_dir.filename().string();
  const fs::path meta_path = split_dir.parent_path() / "metadata.json";
  std::error_code ec;
  if ((split != "train" && split != "eval") || !fs::is_directory(dir, ec) || !fs::exists(meta_path, ec))
    return std::nullopt;
  const auto damaged = [&](const std::string& what) {
    return ShardError(meta_path.string() + ": " + what,
                      "the data set's metadata is damaged: run `joule data create --replace` again");
  };
  nlohmann::json meta;
  std::string text;
  try {
    text = joule::read_text_file(meta_path.string());
  } catch (const joule::IoError& e) {
    throw ShardError(e.what(), e.hint());
  }
  try {
    meta = nlohmann::json::parse(text);
  } catch (const std::exception& e) {
    throw damaged(joule::json_syntax_problem(text, e));
  }
  if (!meta.is_object() || meta.value("format", "") != "joule-pretraining-data") return std::nullopt;
  Recorded r;
  r.by.metadata_path = meta_path.string();
  r.by.split = split;
  try {
    const std::string where = meta_path.string();
    r.shards = split == "train" ? json_field_or<int64_t>(meta, "train_shards", -1, where) : 1;
    // A packed data set's rows hold several sequences each: what the directory must hold is its rows.
    r.sequences = json_field_or<int64_t>(meta, split + "_rows",
                                         json_field_or<int64_t>(meta, split + "_sequences", -1, where), where);
    const nlohmann::json arguments = json_field_or<nlohmann::json>(meta, "arguments", nlohmann::json::object(), where);
    r.by.vocab_fnv1a64 = json_field_or<std::string>(arguments, "vocab_fnv1a64", "", where + " arguments");
    for (const auto& input : json_field_or<nlohmann::json>(arguments, "inputs", nlohmann::json::array(), where))
      r.by.inputs.push_back({json_field<std::string>(input, "path", where + " arguments.inputs"),
                             json_field<uint64_t>(input, "bytes", where + " arguments.inputs"),
                             json_field<int64_t>(input, "mtime_ns", where + " arguments.inputs")});
    for (const auto& chunk : json_field_or<nlohmann::json>(meta, "chunks", nlohmann::json::array(), where)) {
      if (chunk.contains("eval"))
        r.by.held_out_fnv1a64.push_back(json_field<std::string>(chunk["eval"], "fnv1a64", where + " chunks"));
      if (!chunk.contains(split)) continue;
      const nlohmann::json& shard = chunk[split];
      r.checksums[fs::path(json_field<std::string>(shard, "file", where + " chunks")).filename().string()] =
          json_field<std::string>(shard, "fnv1a64", where + " chunks");
    }
  } catch (const joule::Error& e) {
    throw damaged(e.what());
  }
  return r;
}

// The shard count and sequences metadata.json recorded must be what the directory holds (a rerun into the same --out
// once left extra shards).
void check_against_metadata(const Recorded& r, const std::string& spec, size_t shards, int64_t sequences) {
  if ((r.shards >= 0 && static_cast<int64_t>(shards) != r.shards) || (r.sequences >= 0 && sequences != r.sequences))
    throw ShardError(spec + ": holds " + std::to_string(shards) + " shard(s) of " + std::to_string(sequences) +
                         " sequences, but " + r.by.metadata_path + " records " + std::to_string(r.shards) + " of " +
                         std::to_string(r.sequences) + ": files of two data sets are mixed",
                     "recreate the data set into a new directory (or `joule data create --replace`), or remove the "
                     "files that do not belong to it");
}

// A shard `joule data create` recorded must still have the content it recorded (the full checksum, so an edit that
// keeps the size and the first and last 64 KiB is found too).
void check_recorded_checksum(const Recorded& r, const ShardEntry& e) {
  const auto it = r.checksums.find(fs::path(e.path).filename().string());
  if (it == r.checksums.end() || it->second == e.checksum) return;
  throw ShardError(e.path + ": its content (checksum " + e.checksum + ") is not what " + r.by.metadata_path +
                       " records for it (" + it->second + "): the shard was edited or replaced after it was made",
                   "restore the shard, or recreate the data set with `joule data create --replace`");
}

nlohmann::json stats_json(const ShardEntry& e) {
  const ShardStats& s = e.stats;
  return {{"bytes", e.bytes},
          {"mtime_ns", e.mtime_ns},
          {"fingerprint", e.fingerprint},
          {"checksum", e.checksum},
          {"sequences", s.sequences},
          {"seq_len", s.seq_len},
          {"max_predictions", s.max_predictions},
          {"int64_layout", s.int64_layout},
          {"max_token_id", s.max_token_id},
          {"masked_predictions", s.masked_predictions},
          {"real_tokens", s.real_tokens},
          {"pack", s.pack},
          {"packed_sequences", s.packed_sequences}};
}

// The index cache at `path` (.joule-index.json): an object, empty where there is none, it is unused, damaged or of
// another format version (a damaged cache only costs a revalidation).
nlohmann::json read_cache(const std::string& path, bool use_cache) {
  if (use_cache && fs::exists(path)) try {
      std::ifstream in(path);
      nlohmann::json cache = nlohmann::json::parse(in);
      if (cache.is_object() && cache.value("format_version", 0) == kCacheVersion) return cache;
    } catch (const std::exception&) {
    }
  return nlohmann::json::object();
}

}  // namespace

uint64_t Dataset::bytes_to_validate(const std::string& spec, const DatasetOptions& options) try {
  std::string cache_dir;
  const std::vector<std::string> paths = list_shards(spec, &cache_dir);
  const fs::path base = fs::absolute(cache_dir.empty() ? "." : cache_dir).lexically_normal();
  const nlohmann::json cache = read_cache((base / ".joule-index.json").string(), options.use_cache);
  const nlohmann::json entries = cache.value("shards", nlohmann::json::object());
  uint64_t bytes = 0;
  for (const std::string& path : paths) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) continue;
    const auto size = static_cast<uint64_t>(st.st_size);
    const auto it = entries.find(fs::absolute(path).lexically_normal().string());
    const bool cached = it != entries.end() && it->is_object() && it->value("bytes", uint64_t{0}) == size &&
                        it->value("mtime_ns", int64_t{0}) == mtime_ns(st);
    if (!cached) bytes += size;
  }
  return bytes;
} catch (const std::exception&) {
  return 0;
}

Dataset Dataset::open(const std::string& spec, const DatasetOptions& options) {
  Dataset d;
  int64_t whole_shard_chunk = 0;  // the largest chunk of the shards held in one chunk each (capped)
  std::string cache_dir;
  const std::vector<std::string> paths = list_shards(spec, &cache_dir);
  const fs::path base = fs::absolute(cache_dir.empty() ? "." : cache_dir).lexically_normal();
  d.cache_path_ = (base / ".joule-index.json").string();
  d.spec_ = spec;
  const std::optional<Recorded> recorded = read_metadata(spec);
  if (recorded) d.created_by_ = recorded->by;

  nlohmann::json cache = read_cache(d.cache_path_, options.use_cache);
  nlohmann::json& entries = cache["shards"];
  if (!entries.is_object()) entries = nlohmann::json::object();

  for (const std::string& path : paths) {
    ShardEntry e;
    e.path = fs::absolute(path).lexically_normal().string();
    e.name = fs::path(e.path).lexically_relative(base).string();
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) throw ShardError(path + ": cannot stat shard");
    e.bytes = static_cast<uint64_t>(st.st_size);
    e.mtime_ns = mtime_ns(st);
    e.fingerprint = content_fingerprint(path, e.bytes);
    const auto it = entries.find(e.path);
    if (it != entries.end() && (*it)["bytes"] == e.bytes && (*it)["mtime_ns"] == e.mtime_ns &&
        it->value("fingerprint", "") == e.fingerprint && it->value("checksum", "").size() == 16) {
      const auto& j = *it;
      e.checksum = j["checksum"];
      e.stats.sequences = j["sequences"];
      e.stats.seq_len = j["seq_len"];
      e.stats.max_predictions = j["max_predictions"];
      e.stats.int64_layout = j["int64_layout"];
      e.stats.max_token_id = j["max_token_id"];
      e.stats.masked_predictions = j["masked_predictions"];
      e.stats.real_tokens = j["real_tokens"];
      e.stats.pack = j["pack"];
      e.stats.packed_sequences = j["packed_sequences"];
      e.stats.chunk_rows = ShardReader(path).chunk_rows();  // cheap: the file still opens with the layout
    } else {
      e.stats = validate_shard(path);
      e.checksum = checksum_of(path);
      ++d.validated_now_;
      entries[e.path] = stats_json(e);
    }
    if (options.vocab_size > 0) check_vocab(path, e.stats, options.vocab_size);
    if (recorded) check_recorded_checksum(*recorded, e);
    if (d.shards_.empty()) {
      d.seq_len_ = e.stats.seq_len;
      d.max_predictions_ = e.stats.max_predictions;
      d.pack_ = e.stats.pack;
    } else if (e.stats.pack != d.pack_) {
      auto packing = [](int64_t pack) {
        return pack > 0 ? "packed (up to " + std::to_string(pack) + " sequences a row)" : std::string("not packed");
      };
      throw ShardError(path + ": dataset 'packed_input_len': the shard is " + packing(e.stats.pack) + ", " +
                           d.shards_.front().path + " is " + packing(d.pack_) + "; one dataset must be packed one way",
                       "pack every shard with the same `joule data pack --max-per-pack K`, or keep them apart");
    } else if (e.stats.seq_len != d.seq_len_ || e.stats.max_predictions != d.max_predictions_) {
      throw ShardError(path + ": dataset 'input_ids'/'masked_lm_positions': sequence length " +
                       std::to_string(e.stats.seq_len) + " and max predictions " +
                       std::to_string(e.stats.max_predictions) + " differ from " + d.shards_.front().path + " (" +
                       std::to_string(d.seq_len_) + ", " + std::to_string(d.max_predictions_) +
                       "); one dataset must have one shape");
    }
    d.offsets_.push_back(d.total_);
    d.total_ += e.stats.sequences;
    d.packed_sequences_ += e.stats.packed_sequences;
    d.real_tokens_ += e.stats.real_tokens;
    d.masked_predictions_ += e.stats.masked_predictions;
    if (e.stats.chunk_rows > 0) {
      const int64_t rows = std::min(e.stats.chunk_rows, kMaxBlockRows);
      if (e.stats.chunk_rows < e.stats.sequences)  // the smallest chunking, so no shard inflates a chunk for a few rows
        d.block_rows_ = d.block_rows_ == 0 ? rows : std::min(d.block_rows_, rows);
      else  // one chunk holds the whole shard (a small shard): inflated once per block of it, so it does not set them
        whole_shard_chunk = std::max(whole_shard_chunk, rows);
    }
    d.shards_.push_back(std::move(e));
  }
  if (recorded) check_against_metadata(*recorded, spec, d.shards_.size(), d.total_);
  if (d.block_rows_ == 0) d.block_rows_ = whole_shard_chunk;
  if (d.block_rows_ == 0) d.block_rows_ = 1;  // no shard is chunked: any row reads cheaply, so every row is a block

  if (options.use_cache && d.validated_now_ > 0) {
    cache["format_version"] = kCacheVersion;
    try {
      write_file_atomically(d.cache_path_, cache.dump(1) + "\n");
    } catch (const joule::IoError& e) {
      std::cerr << "joule: note: cannot write the shard index cache (" << e.what()
                << "); shards will be validated again next time\n";
    }
  }
  return d;
}

std::vector<ShardIdentity> Dataset::identity() const {
  std::vector<ShardIdentity> out;
  for (const ShardEntry& e : shards_) out.push_back({e.name, e.checksum, e.bytes, e.stats.sequences});
  return out;
}

std::string Dataset::digest() const {
  joule::Fnv1a64 h;
  for (const ShardIdentity& s : identity())
    h.add(s.name + " " + std::to_string(s.bytes) + " " + std::to_string(s.sequences) + " " + s.checksum + "\n");
  return joule::hex64(h.value());
}

void Dataset::check_unchanged(size_t index) const {
  const ShardEntry& e = shards_.at(index);
  struct stat st {};
  std::string now;
  if (::stat(e.path.c_str(), &st) != 0)
    now = std::string("now it cannot be read: ") + std::strerror(errno);
  else if (static_cast<uint64_t>(st.st_size) != e.bytes || mtime_ns(st) != e.mtime_ns)
    now = "now it has " + std::to_string(st.st_size) + " bytes and another modification time";
  if (now.empty()) return;
  throw ShardError(e.path + ": changed while this job reads it (" + std::to_string(e.bytes) +
                       " bytes when the data set was opened; " + now + ")",
                   "a shard must not change under a running job: restore it and resume with --resume auto (a resume "
                   "compares the data set with the one the run recorded)");
}

BlockLayout Dataset::block_layout() const {
  std::vector<int64_t> rows;
  for (const ShardEntry& e : shards_) rows.push_back(e.stats.sequences);
  return BlockLayout(std::move(rows), block_rows_);
}

std::pair<size_t, int64_t> Dataset::locate(int64_t id) const {
  if (id < 0 || id >= total_)
    throw joule::InternalError("sequence id " + std::to_string(id) + " outside the dataset's " +
                               std::to_string(total_));
  const size_t shard =
      static_cast<size_t>(std::upper_bound(offsets_.begin(), offsets_.end(), id) - offsets_.begin()) - 1;
  return {shard, id - offsets_[shard]};
}

std::string data_create_split(const std::string& spec, const std::string& split) {
  const fs::path d(spec);
  std::error_code ec;
  if (spec.empty() || !fs::is_directory(d, ec) || !fs::exists(d / "metadata.json", ec) ||
      !fs::is_directory(d / "train", ec))
    return spec;
  if (fs::is_directory(d / split, ec)) return (d / split).string();
  throw ShardError(spec + ": this `joule data create` output has no " + split + "/ (it was made without " +
                       (split == "eval" ? "--eval-documents" : "training shards") + ")",
                   split == "eval" ? "make it again with --eval-documents N, or give the shards to evaluate on "
                                     "(e.g. --data " +
                                         (d / "train").string() + " evaluates on training data)"
                                   : "give the shards directory itself");
}

std::vector<std::string> shard_files(const std::string& spec) {
  std::string cache_dir;
  return list_shards(spec, &cache_dir);
}

std::string find_vocab_beside(const std::string& spec) {
  fs::path p = fs::path(spec).lexically_normal();
  if (p.filename().empty()) p = p.parent_path();  // "shards/train/" as typed is shards/train
  fs::path dir = fs::is_directory(p) ? p : p.parent_path();
  for (const fs::path& candidate : {dir / "vocab.txt", dir.parent_path() / "vocab.txt"})
    if (fs::exists(candidate)) return candidate.string();
  return "";
}

std::string describe_changes(const std::vector<ShardIdentity>& recorded, const std::vector<ShardIdentity>& now) {
  std::map<std::string, const ShardIdentity*> before, after;
  for (const ShardIdentity& s : recorded) before[s.name] = &s;
  for (const ShardIdentity& s : now) after[s.name] = &s;
  std::vector<std::string> removed, added, changed;
  const auto what = [](const ShardIdentity& s) {
    return std::to_string(s.bytes) + " bytes, " + std::to_string(s.sequences) + " sequences, checksum " + s.checksum;
  };
  for (const auto& [name, s] : before) {
    const auto it = after.find(name);
    if (it == after.end())
      removed.push_back(name);
    else if (!(*it->second == *s))
      changed.push_back(name + " (recorded: " + what(*s) + "; now: " + what(*it->second) + ")");
  }
  for (const auto& [name, s] : after)
    if (!before.count(name)) added.push_back(name);
  std::string out;
  const auto list = [&](const char* title, const std::vector<std::string>& names) {
    if (names.empty()) return;
    out += std::string(out.empty() ? "" : "; ") + title + ": ";
    for (size_t i = 0; i < names.size() && i < 3; ++i) out += (i ? ", " : "") + names[i];
    if (names.size() > 3) out += " and " + std::to_string(names.size() - 3) + " more";
  };
  list("changed", changed);
  list("removed", removed);
  list("added", added);
  return out;
}

void check_vocab_file(const Dataset& dataset, const std::string& vocab_path) {
  const std::optional<CreatedBy>& by = dataset.created_by();
  if (!by || by->vocab_fnv1a64.empty()) return;
  const std::string checksum = joule::hex64(joule::fnv1a64_file(vocab_path));
  if (checksum == by->vocab_fnv1a64) return;
  throw ShardError(vocab_path + ": not the vocabulary the shards of " + dataset.spec() +
                       " were made with (its checksum " + checksum + "; " + by->metadata_path +
                       " records vocab_fnv1a64 " + by->vocab_fnv1a64 + "): every token id would mean another word",
                   "give --vocab (data.vocab) the vocab.txt the shards were made with (`joule data create` leaves it "
                   "beside them as OUT/vocab.txt), or recreate the shards with this vocabulary");
}

namespace {

// A path in a form two records can be compared in.
std::string path_key(const std::string& path) {
  std::error_code ec;
  const fs::path canonical = fs::weakly_canonical(path, ec);
  return ec ? fs::path(path).lexically_normal().string() : canonical.string();
}

// An input file as `joule data create` recorded it: its path, size and modification time must all agree.
std::string input_key(const CreatedBy::Input& input) {
  return path_key(input.path) + "\n" + std::to_string(input.bytes) + "\n" + std::to_string(input.mtime_ns);
}

}  // namespace

void check_held_out(const Dataset& train, const Dataset& eval) {
  const std::string hint =
      "give data.eval (--eval-data) shards made from other documents: `joule data create` holds out --eval-documents "
      "of its input into OUT/eval/, disjoint from OUT/train/";
  std::map<std::string, const ShardEntry*> by_checksum;
  for (const ShardEntry& e : train.shards()) by_checksum[e.checksum] = &e;
  for (const ShardEntry& e : eval.shards())
    if (const auto it = by_checksum.find(e.checksum); it != by_checksum.end())
      throw ShardError("eval shard " + e.path + " has the content of training shard " + it->second->path +
                           " (checksum " + e.checksum + "): the model would be evaluated on data it trains on",
                       hint);
  const std::optional<CreatedBy>&t = train.created_by(), &v = eval.created_by();
  if (!t || !v || path_key(t->metadata_path) == path_key(v->metadata_path)) return;
  // The eval shards that the training data's own split held out (a copy of the data set, or of its train/ with its
  // metadata.json, beside the original eval/): disjoint by construction, whatever the files are called now.
  const auto held_out = [&](const ShardEntry& e) {
    return std::find(t->held_out_fnv1a64.begin(), t->held_out_fnv1a64.end(), e.checksum) != t->held_out_fnv1a64.end();
  };
  if (!eval.shards().empty() && std::all_of(eval.shards().begin(), eval.shards().end(), held_out)) return;
  std::map<std::string, std::string> train_inputs;
  for (const CreatedBy::Input& input : t->inputs) train_inputs[input_key(input)] = input.path;
  for (const CreatedBy::Input& input : v->inputs)
    if (const auto it = train_inputs.find(input_key(input)); it != train_inputs.end())
      throw ShardError("the eval shards " + eval.spec() + " and the training shards " + train.spec() +
                           " were both made from " + it->second + " (" + v->metadata_path + " and " + t->metadata_path +
                           " list it): the eval documents are in the training data",
                       hint);
}

}  // namespace joule::data
