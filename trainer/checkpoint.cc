#include "trainer/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>

#include <nlohmann/json.hpp>

#include "launch/util/file_io.h"
#include "launch/util/hash.h"
#include "launch/util/json_field.h"
#include "models/model_dir.h"
#include "models/safetensors.h"

namespace joule::trainer {
namespace fs = std::filesystem;
namespace st = models::safetensors;

namespace {

// What to do about a failed write, by its cause.
std::string write_hint(int err) {
  if (err == ENOSPC || err == EDQUOT)
    return "the file system is full: free space (or lower checkpoint.keep), then --resume auto";
  if (err == EROFS || err == EACCES || err == EPERM)
    return "the run directory is not writable: fix its permissions or choose another --run-dir";
  return "check the file system of the run directory, then --resume auto (the previous checkpoint is untouched)";
}

[[noreturn]] void write_failed(const std::string& path, const std::string& what, int err) {
  throw CheckpointError(path + ": " + what + " failed: " + std::strerror(err) +
                            " (the checkpoint is incomplete and will not be marked COMPLETE)",
                        write_hint(err));
}

// Flushes a file or a directory to stable storage; a failure (or an injected one) is an error: COMPLETE may only
// follow a durable write.
void fsync_path(const std::string& path, bool inject_failure) {
  const UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (!fd) write_failed(path, "open for fsync", errno);
  const int rc = inject_failure ? (errno = EIO, -1) : ::fsync(fd.get());
  if (rc != 0) write_failed(path, "fsync", errno);
}

void write_file(const std::string& path, const std::string& bytes) {
  errno = 0;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) write_failed(path, "open", errno ? errno : EIO);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.flush();
  if (!out) write_failed(path, "write", errno ? errno : EIO);
  out.close();
  if (!out) write_failed(path, "close", errno ? errno : EIO);
}

std::string read_file(const std::string& path) {
  try {
    return read_text_file(path);
  } catch (const joule::IoError& e) {
    throw CheckpointError(e.what());
  }
}

void write_tensors(const std::string& path, const std::vector<std::pair<std::string, torch::Tensor>>& named,
                   const std::map<std::string, std::string>& metadata = {{"format", "pt"}}) {
  std::vector<torch::Tensor> keep;
  std::vector<st::TensorToWrite> tensors;
  for (const auto& [name, t] : named) {
    keep.push_back(t.detach().to(torch::kCPU, torch::kFloat32).contiguous());
    tensors.push_back({name, st::DType::F32, keep.back().sizes().vec(), keep.back().data_ptr()});
  }
  try {
    st::write(path, tensors, metadata);
  } catch (const st::FormatError& e) {  // the writer names the file and the system's reason
    const std::string what = e.what();
    const int err = what.find(std::strerror(ENOSPC)) != std::string::npos  ? ENOSPC
                    : what.find(std::strerror(EROFS)) != std::string::npos ? EROFS
                                                                           : EIO;
    throw CheckpointError(what + " (the checkpoint is incomplete and will not be marked COMPLETE)", write_hint(err));
  }
}

// The optimizer state of a sharded run (optimizer.shard = zero1): rank R of N writes optimizer_shard_R_of_N.safetensors
// with its pieces of every moment, and the file's metadata "joule_pieces" says where each piece sits:
// {"exp_avg.<param>": [begin, numel of the whole]}. The manifest's "optimizer" entry lists the files; a reader
// assembles any rank's part of any moment from them, whatever the world size and sharding that reads it.
constexpr const char* kPiecesKey = "joule_pieces";

std::string shard_file_name(int rank, int world) {
  return "optimizer_shard_" + std::to_string(rank) + "_of_" + std::to_string(world) + ".safetensors";
}

void write_optimizer_shard(const std::string& path, const Optimizer& optimizer) {
  std::vector<std::pair<std::string, torch::Tensor>> named;
  nlohmann::json pieces = nlohmann::json::object();
  for (const StatePiece& p : optimizer.state()) {
    if (p.values.numel() == 0) continue;
    named.emplace_back(p.name, p.values);
    pieces[p.name] = {p.begin, p.numel};
  }
  write_tensors(path, named, {{"format", "pt"}, {kPiecesKey, pieces.dump()}});
}

std::string step_name(int64_t step) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "step_%08lld", static_cast<long long>(step));
  return buf;
}

// A name joule gives a checkpoint: step_ and eight or more digits, or that with .tmp while it is written; nothing
// else (a user's "step_6_before_lr" or "best" is never resumed from or pruned).
bool is_checkpoint_name(std::string name) {
  if (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0) name.resize(name.size() - 4);
  if (name.rfind("step_", 0) != 0 || name.size() < 13) return false;
  return std::all_of(name.begin() + 5, name.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// trainer_state.json's keys, once: state_json writes them and read_trainer_state reads them. Keys an older joule did
// not write are left out at their defaults and read as them.
using joule::JsonField;
constexpr joule::JsonPresence kOmitDefault = joule::JsonPresence::omit_default;
const std::vector<JsonField<TrainerState>> kStateFields = {
    {"step", &TrainerState::step},
    {"sequences", &TrainerState::sequences},
    {"wall_seconds", &TrainerState::wall_seconds},
    {"segments", &TrainerState::segments},
    {"world_size", &TrainerState::world_size},
    {"config_hash", &TrainerState::config_hash},
    {"nonfinite_skipped", &TrainerState::nonfinite_skipped, joule::JsonPresence::optional},
    {"nonfinite_streak", &TrainerState::nonfinite_streak, joule::JsonPresence::optional},
    {"config", &TrainerState::config_toml, kOmitDefault},
    {"used_config", &TrainerState::used_config_toml, kOmitDefault},
    {"compute_precision", &TrainerState::compute_precision, kOmitDefault},
    {"fp32_gemm", &TrainerState::fp32_gemm, kOmitDefault}};
// Where the data stands, in the same object.
const std::vector<JsonField<data::SamplerState>> kSamplerFields = {{"epoch", &data::SamplerState::epoch},
                                                                   {"position", &data::SamplerState::position}};

nlohmann::json state_json(const TrainerState& s) {
  nlohmann::json j = nlohmann::json::object();
  joule::write_json_fields(s, kStateFields, j);
  joule::write_json_fields(s.sampler, kSamplerFields, j);
  if (!s.ledger_json.empty()) j["ledger"] = nlohmann::json::parse(s.ledger_json);
  if (!s.data_json.empty()) j["data"] = nlohmann::json::parse(s.data_json);
  if (!s.target_json.empty()) j["target_accuracy"] = nlohmann::json::parse(s.target_json);
  return j;
}

}  // namespace

namespace {

// Rank 0's part of the optimizer state in checkpoint `tmp`: the whole moments in optimizer.safetensors, or (sharded)
// the check that every rank's shard is there. Returns the files, for the manifest.
nlohmann::json rank0_optimizer_files(const std::string& tmp, const Optimizer& optimizer, int world) {
  nlohmann::json optimizer_files = nlohmann::json::array();
  if (optimizer.sharded()) {
    for (int r = 0; r < world; ++r) {
      const std::string name = shard_file_name(r, world);
      // Every rank wrote its shard before the barrier; one rank 0 cannot see (a shared file system still
      // propagating) would make a checkpoint that never verifies: not marked COMPLETE.
      std::error_code ec;
      if (!fs::is_regular_file(fs::path(tmp) / name, ec))
        throw CheckpointError(tmp + "/" + name + ": rank " + std::to_string(r) +
                                  "'s optimizer shard is not visible to rank 0 after the write (the checkpoint is "
                                  "incomplete and will not be marked COMPLETE)",
                              "check that every node mounts the same run directory (and that it is not still "
                              "propagating), then --resume auto (the previous checkpoint is untouched)");
      optimizer_files.push_back(name);
    }
  } else {
    std::vector<std::pair<std::string, torch::Tensor>> whole;
    for (const StatePiece& p : optimizer.state()) whole.emplace_back(p.name, p.values);
    write_tensors((fs::path(tmp) / "optimizer.safetensors").string(), whole);
    optimizer_files.push_back("optimizer.safetensors");
  }
  return optimizer_files;
}

}  // namespace

double checkpoint_bytes(double parameters) { return parameters * 4 * 3 + (1 << 20); }

double checkpoint_wait_seconds(double collective_timeout_seconds, double bytes) {
  constexpr double kSlowestWriteBytesPerSecond = 10e6;
  return collectives::io_wait_seconds(collective_timeout_seconds, bytes, kSlowestWriteBytesPerSecond);
}

std::string save_checkpoint(const std::string& root, const models::BertForPreTraining& model,
                            const Optimizer& optimizer, const TrainerState& state, collectives::Communicator& comm,
                            int64_t keep, double collective_timeout_seconds, const CheckpointFaults& faults) {
  auto stage = [&](const char* name) {
    if (faults.after_stage) faults.after_stage(name);
  };
  auto fsync_path = [&](const std::string& path) { trainer::fsync_path(path, faults.fail_fsync); };
  const int rank = comm.info().rank;
  const std::string final_dir = (fs::path(root) / step_name(state.step)).string();
  const std::string tmp = final_dir + ".tmp";
  double parameters = 0;
  for (const torch::Tensor& p : model->parameters()) parameters += static_cast<double>(p.numel());
  const double wait_seconds = checkpoint_wait_seconds(collective_timeout_seconds, checkpoint_bytes(parameters));
  auto wait_for_every_rank = [&](const std::string& until) {
    comm.barrier({collectives::ReduceOp::kSum, wait_seconds, "checkpoint " + step_name(state.step) + ": " + until});
  };
  if (rank == 0) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    if (!ec) fs::create_directories(tmp, ec);
    if (ec) write_failed(tmp, "creating the directory", ec.value());
  }
  wait_for_every_rank("rank 0 making its directory");
  // Every rank: its generator state (what draws from it: dropout does not in a run, models/dropout.h).
  const torch::Tensor rng = at::detail::getDefaultCPUGenerator().get_state();
  write_file((fs::path(tmp) / ("rng_rank_" + std::to_string(rank) + ".bin")).string(),
             std::string(static_cast<const char*>(rng.data_ptr()), static_cast<size_t>(rng.numel())));
  stage("rng");
  // Sharded: every rank its own part of the optimizer state.
  const int world = comm.info().world_size;
  if (optimizer.sharded()) write_optimizer_shard((fs::path(tmp) / shard_file_name(rank, world)).string(), optimizer);
  wait_for_every_rank("every rank writing its files");
  if (rank == 0) {
    write_tensors((fs::path(tmp) / "model.safetensors").string(), model->hf_named_parameters());
    stage("model");
    const nlohmann::json optimizer_files = rank0_optimizer_files(tmp, optimizer, world);
    stage("optimizer");
    nlohmann::json s = state_json(state);
    s["optimizer_steps"] = optimizer.steps();
    write_file((fs::path(tmp) / "trainer_state.json").string(), s.dump(1) + "\n");
    stage("state");
    nlohmann::json manifest = {
        {"format", "joule-checkpoint"},
        {"format_version", optimizer.sharded() ? kCheckpointFormatVersion : 1},
        {"step", state.step},
        {"world_size", state.world_size},
        {"config_hash", state.config_hash},
        {"optimizer",
         {{"shard", sharding_name(optimizer.sharded() ? OptimizerSharding::zero1 : OptimizerSharding::none)},
          {"files", optimizer_files}}}};
    for (const auto& e : fs::directory_iterator(tmp)) {
      fsync_path(e.path().string());
      manifest["files"][e.path().filename().string()] = {
          {"bytes", fs::file_size(e.path())}, {"fnv1a64", joule::hex64(joule::fnv1a64_file(e.path().string()))}};
    }
    write_file((fs::path(tmp) / "manifest.json").string(), manifest.dump(1) + "\n");
    fsync_path((fs::path(tmp) / "manifest.json").string());
    stage("manifest");
    fsync_path(tmp);
    std::error_code ec;
    fs::remove_all(final_dir, ec);
    if (!ec) fs::rename(tmp, final_dir, ec);
    if (ec) write_failed(final_dir, "renaming " + tmp + " to it", ec.value());
    fsync_path(root);
    stage("renamed");
    write_file((fs::path(final_dir) / "COMPLETE").string(), "");
    fsync_path(final_dir);
    // Keep the newest `keep` complete checkpoints (joule's own names only).
    std::vector<std::string> complete;
    for (const std::string& d : list_checkpoints(root))
      if (fs::exists(fs::path(d) / "COMPLETE")) complete.push_back(d);
    for (size_t i = static_cast<size_t>(keep); i < complete.size(); ++i) fs::remove_all(complete[i]);
  }
  wait_for_every_rank("rank 0 writing the weights and the manifest");
  return final_dir;
}

namespace {

// A required field of one of a checkpoint's JSON files: a missing key or another type is a CheckpointError naming
// the file and the key.
template <typename T>
T field(const nlohmann::json& j, const std::string& key, const std::string& file) {
  return joule::json_field<T, CheckpointError>(j, key, file);
}

nlohmann::json parse_json_file(const std::string& path) {
  const std::string text = read_file(path);
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw CheckpointError(path + ": " + joule::json_syntax_problem(text, e));
  }
}

// The files holding the optimizer state: the manifest's "optimizer" entry, or optimizer.safetensors (checkpoints of
// joules before ZeRO-1, which wrote only that).
std::vector<std::string> optimizer_files(const nlohmann::json& manifest, const std::string& path) {
  if (!manifest.contains("optimizer")) return {"optimizer.safetensors"};
  const auto entry = field<nlohmann::json>(manifest, "optimizer", path);
  const auto files = field<std::vector<std::string>>(entry, "files", path + " optimizer");
  if (files.empty()) throw CheckpointError(path + ": optimizer.files is empty");
  return files;
}

// "" when the manifest's files list the model, the optimizer state and the trainer state; else which is not listed.
std::string unlisted_core_file(const nlohmann::json& manifest, const std::string& path) {
  const nlohmann::json& files = manifest.at("files");
  std::vector<std::string> needed = {"model.safetensors", "trainer_state.json"};
  for (const std::string& f : optimizer_files(manifest, path)) needed.push_back(f);
  for (const std::string& need : needed)
    if (!files.is_object() || !files.contains(need)) return "manifest.json does not list " + need;
  return "";
}

// Checks the manifest against the files; returns "" when valid, else what is wrong.
std::string verify(const std::string& dir) {
  if (!fs::exists(fs::path(dir) / "COMPLETE")) return "incomplete (no COMPLETE marker: the write was interrupted)";
  const std::string path = (fs::path(dir) / "manifest.json").string();
  try {
    const nlohmann::json manifest = parse_json_file(path);
    if (field<std::string>(manifest, "format", path) != "joule-checkpoint")
      return "manifest.json is not a joule checkpoint manifest";
    if (const int version = field<int>(manifest, "format_version", path);
        version < 1 || version > kCheckpointFormatVersion)
      return "format version " + std::to_string(version) + ", this joule reads versions 1 to " +
             std::to_string(kCheckpointFormatVersion);
    const nlohmann::json files = field<nlohmann::json>(manifest, "files", path);
    for (const auto& [name, info] : files.items()) {
      const std::string where = path + " files." + name;
      const std::string p = path_inside(dir, name, path);            // an entry never leads out of the checkpoint
      const uint64_t bytes = field<uint64_t>(info, "bytes", where);  // read in this order: errors name the first
      const std::string checksum = field<std::string>(info, "fnv1a64", where);
      if (const std::string problem = listed_file_problem(p, bytes, checksum, "the manifest"); !problem.empty())
        return name + " " + problem;
    }
    if (const std::string missing = unlisted_core_file(manifest, path); !missing.empty()) return missing;
  } catch (const joule::Error& e) {  // CheckpointError (a bad manifest), IoError (an entry or file that is not right)
    return e.what();
  }
  return "";
}

// trainer_state.json: the state, and the optimizer's step count in `optimizer_steps`.
TrainerState read_trainer_state(const std::string& dir, int64_t* optimizer_steps) {
  const std::string path = (fs::path(dir) / "trainer_state.json").string();
  const nlohmann::json s = parse_json_file(path);
  *optimizer_steps = field<int64_t>(s, "optimizer_steps", path);
  TrainerState state;
  joule::read_json_fields<TrainerState, CheckpointError>(s, kStateFields, state, path);
  joule::read_json_fields<data::SamplerState, CheckpointError>(s, kSamplerFields, state.sampler, path);
  if (s.contains("ledger")) state.ledger_json = field<nlohmann::json>(s, "ledger", path).dump();
  if (s.contains("data")) state.data_json = field<nlohmann::json>(s, "data", path).dump();
  if (s.contains("target_accuracy")) state.target_json = field<nlohmann::json>(s, "target_accuracy", path).dump();
  return state;
}

// "" when `dir`'s manifest has the checksum `manifest_fnv1a64` and every file it lists has its size; else what differs.
std::string manifest_problem(const std::string& dir, const std::string& manifest_fnv1a64) {
  const std::string path = (fs::path(dir) / "manifest.json").string();
  if (!fs::exists(path)) return "no manifest.json";
  if (joule::hex64(joule::fnv1a64_file(path)) != manifest_fnv1a64) return "its manifest.json differs from rank 0's";
  try {
    const nlohmann::json manifest = parse_json_file(path);
    const nlohmann::json files = field<nlohmann::json>(manifest, "files", path);
    for (const auto& [name, info] : files.items()) {
      const std::string p = path_inside(dir, name, path);
      // Sizes only: rank 0 read every checksum, and this rank sees the same manifest.
      if (const std::string problem =
              listed_file_problem(p, field<uint64_t>(info, "bytes", path + " files." + name), "", "the manifest");
          !problem.empty())
        return name + " " + problem;
    }
    if (const std::string missing = unlisted_core_file(manifest, path); !missing.empty()) return missing;
  } catch (const joule::Error& e) {  // CheckpointError (a bad manifest), IoError (an entry that leads out)
    return e.what();
  }
  return "";
}

// The optimizer state of a checkpoint as pieces of moments, from whole tensors (optimizer.safetensors) or the shards
// of a sharded run (their "joule_pieces" metadata): any part of any moment is read from the pieces that hold it.
class OptimizerStateFiles {
 public:
  OptimizerStateFiles(const std::string& dir, const std::vector<std::string>& names) {
    for (const std::string& name : names) {
      files_.push_back(st::File::open(path_inside(dir, name, dir + "/manifest.json")));
      const st::File& file = files_.back();
      const auto& metadata = file.header().metadata;
      const auto listed = metadata.find(kPiecesKey);
      nlohmann::json pieces;
      if (listed != metadata.end()) try {
          pieces = nlohmann::json::parse(listed->second);
        } catch (const nlohmann::json::exception&) {
          throw CheckpointError(file.path() + ": its " + kPiecesKey + " metadata is not JSON");
        }
      for (const st::TensorInfo& t : file.tensors()) {
        Piece p{&file, &t, 0, t.numel()};
        if (listed != metadata.end()) {  // a shard: where the piece sits in its moment
          if (!pieces.contains(t.name) || !pieces[t.name].is_array() || pieces[t.name].size() != 2 ||
              !pieces[t.name][0].is_number_integer() || !pieces[t.name][1].is_number_integer())
            throw CheckpointError(file.path() + ": " + kPiecesKey + " has no [begin, numel] for '" + t.name + "'");
          p.begin = pieces[t.name][0].get<int64_t>();
          p.numel = pieces[t.name][1].get<int64_t>();
          if (p.begin < 0 || p.numel < t.numel() || p.begin > p.numel - t.numel())
            throw CheckpointError(file.path() + ": the piece of '" + t.name + "' at " + std::to_string(p.begin) +
                                  " runs past its moment's " + std::to_string(p.numel) + " elements");
        }
        if (t.dtype != st::DType::F32) throw CheckpointError(file.path() + ": '" + t.name + "' is not F32");
        pieces_[t.name].push_back(p);
      }
    }
  }

  // Fills want.values from the pieces that overlap it; every element must be covered.
  void read(const StatePiece& want) const {
    const auto it = pieces_.find(want.name);
    const std::string where = "the checkpoint's optimizer state";
    if (it == pieces_.end()) throw CheckpointError(where + " has no '" + want.name + "'");
    const int64_t begin = want.begin, end = want.begin + want.values.numel();
    // The pieces that overlap the range, in order: they must tile it, no gap and no overlap.
    std::vector<const Piece*> parts;
    for (const Piece& p : it->second) {
      if (p.numel != want.numel)
        throw CheckpointError(p.file->path() + ": '" + want.name + "' has " + std::to_string(p.numel) +
                              " elements, the parameter " + std::to_string(want.numel) +
                              " (another shape than the parameter)");
      if (std::max(begin, p.begin) < std::min(end, p.begin + p.tensor->numel())) parts.push_back(&p);
    }
    std::sort(parts.begin(), parts.end(), [](const Piece* a, const Piece* b) { return a->begin < b->begin; });
    int64_t at = begin;
    for (const Piece* p : parts) {
      const int64_t lo = std::max(begin, p->begin), hi = std::min(end, p->begin + p->tensor->numel());
      if (lo != at)
        throw CheckpointError(where + ": elements [" + std::to_string(std::min(at, lo)) + ", " +
                              std::to_string(std::max(at, lo)) + ") of '" + want.name + "' are " +
                              (lo > at ? "in none of its files (a shard missing)" : "in two of its files"));
      const auto* data = reinterpret_cast<const float*>(p->file->data(*p->tensor));
      want.values.narrow(0, lo - begin, hi - lo)
          .copy_(torch::from_blob(const_cast<float*>(data) + (lo - p->begin), {hi - lo}, torch::kFloat32));
      at = hi;
    }
    if (at != end)
      throw CheckpointError(where + ": elements [" + std::to_string(at) + ", " + std::to_string(end) + ") of '" +
                            want.name + "' are in none of its files (a shard missing)");
  }

 private:
  struct Piece {
    const st::File* file;
    const st::TensorInfo* tensor;
    int64_t begin, numel;
  };
  std::deque<st::File> files_;  // stable addresses
  std::map<std::string, std::vector<Piece>> pieces_;
};

}  // namespace

std::vector<std::string> list_checkpoints(const std::string& root) {
  std::vector<std::string> dirs;
  std::error_code ec;
  const fs::file_status status = fs::status(root, ec);
  if (status.type() == fs::file_type::not_found) return dirs;  // no checkpoints yet
  // A checkpoint directory that is there but cannot be listed is an error, never "no checkpoints" (a fresh start
  // would write over them).
  const auto unreadable = [&](const std::error_code& e) {
    throw joule::IoError(root + ": cannot list the checkpoints: " + e.message(),
                         "check the directory's permissions (and that its file system is mounted), then rerun");
  };
  if (ec) unreadable(ec);
  if (status.type() != fs::file_type::directory) return dirs;
  fs::directory_iterator it(root, ec), end;
  if (ec) unreadable(ec);
  for (; it != end; it.increment(ec)) {
    if (ec) unreadable(ec);
    if (it->is_directory(ec) && is_checkpoint_name(it->path().filename().string())) dirs.push_back(it->path().string());
  }
  if (ec) unreadable(ec);
  std::sort(dirs.rbegin(), dirs.rend());
  return dirs;
}

std::string verify_checkpoint(const std::string& dir) { return verify(dir); }

std::optional<std::string> find_latest_checkpoint(const std::string& root, std::vector<std::string>* warnings) {
  for (const std::string& d : list_checkpoints(root)) {
    const std::string problem = verify(d);
    if (problem.empty()) return d;
    if (warnings) warnings->push_back("skipping checkpoint " + d + ": " + problem);
  }
  return std::nullopt;
}

TrainerState read_checkpoint_state(const std::string& dir) {
  int64_t optimizer_steps = 0;
  return read_trainer_state(dir, &optimizer_steps);
}

std::string manifest_checksum(const std::string& dir) {
  return joule::hex64(joule::fnv1a64_file((fs::path(dir) / "manifest.json").string()));
}

TrainerState load_checkpoint(const std::string& dir, models::BertForPreTraining& model, Optimizer& optimizer, int rank,
                             int world_size, const std::string& verified_manifest) {
  if (verified_manifest.empty()) {
    const std::string problem = verify(dir);
    if (!problem.empty()) throw CheckpointError(dir + ": " + problem);
  } else {
    // Rank 0 read and verified every byte; here, that this rank sees the same checkpoint: the same manifest and
    // files of the manifest's sizes (a shared file system that has not caught up fails here, clearly).
    const std::string problem = manifest_problem(dir, verified_manifest);
    if (!problem.empty())
      throw CheckpointError(
          dir + ": rank " + std::to_string(rank) + " does not see the checkpoint rank 0 verified: " + problem,
          "the ranks' views of the run directory differ (a shared file system still propagating?): wait and "
          "--resume auto again, or check that every node mounts the same run directory");
  }
  int64_t optimizer_steps = 0;
  TrainerState state = read_trainer_state(dir, &optimizer_steps);
  try {
    models::load_weights(model, (fs::path(dir) / "model.safetensors").string());
  } catch (const std::exception& e) {
    throw CheckpointError(std::string(e.what()) + " (a checkpoint of another model shape?)");
  }
  const std::string manifest_path = (fs::path(dir) / "manifest.json").string();
  OptimizerStateFiles state_files(dir, optimizer_files(parse_json_file(manifest_path), manifest_path));
  optimizer.load_state([&](const StatePiece& want) { state_files.read(want); }, optimizer_steps);
  const fs::path rng = fs::path(dir) / ("rng_rank_" + std::to_string(rank) + ".bin");
  if (state.world_size == world_size && fs::exists(rng)) {
    const std::string bytes = read_file(rng.string());
    torch::Tensor t = torch::empty({static_cast<int64_t>(bytes.size())}, torch::kUInt8);
    std::memcpy(t.data_ptr(), bytes.data(), bytes.size());
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(t);
  }
  return state;
}

}  // namespace joule::trainer
