#include "data/pack.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>

#include <nlohmann/json.hpp>

#include "data/create.h"
#include "data/create_output.h"
#include "data/dataset.h"
#include "data/hdf5.h"
#include "launch/util/error.h"
#include "launch/util/file_io.h"
#include "launch/util/json_field.h"

namespace joule::data {
namespace fs = std::filesystem;

namespace {

// The sequences by length, each length's in index order (a counting sort: lengths are small).
std::vector<std::vector<uint32_t>> by_length(const std::vector<int32_t>& lengths, int64_t row_length,
                                             int max_per_pack) {
  if (max_per_pack < 1) throw joule::InternalError("pack_sequences: max_per_pack < 1");
  std::vector<std::vector<uint32_t>> of(static_cast<size_t>(row_length) + 1);
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] < 1 || lengths[i] > row_length)
      throw joule::InternalError("pack_sequences: length " + std::to_string(lengths[i]) + " outside [1, " +
                                 std::to_string(row_length) + "]");
    of[static_cast<size_t>(lengths[i])].push_back(static_cast<uint32_t>(i));
  }
  return of;
}

// What gap filling has left of each length, with "the longest length left at most x" in a few steps.
class LengthsLeft {
 public:
  explicit LengthsLeft(const std::vector<std::vector<uint32_t>>& of) : left_(of.size()), below_(of.size()) {
    for (size_t l = 0; l < of.size(); ++l) left_[l] = static_cast<int64_t>(of[l].size());
    refresh();
  }
  int64_t& operator[](int64_t length) { return left_[static_cast<size_t>(length)]; }
  // The longest length in [1, x] with a sequence left; 0 where none.
  int64_t at_most(int64_t x) const {
    int64_t l = below_[static_cast<size_t>(x)];
    while (l > 0 && left_[static_cast<size_t>(l)] == 0) l = below_[static_cast<size_t>(l - 1)];
    return l;
  }
  // below_ again (after each row shape: O(row_length), while at_most stays right between refreshes because counts only
  // fall, so every length left was in the chain when it was last refreshed).
  void refresh() {
    for (size_t l = 1; l < left_.size(); ++l) below_[l] = left_[l] > 0 ? static_cast<int64_t>(l) : below_[l - 1];
  }

 private:
  std::vector<int64_t> left_, below_;  // below_[x]: the longest length <= x left when last refreshed
};

// The pair (or single sequence) from `left` that fills most of `room`: {a, b, a + b}, b = 0 for a single, a = 0 for
// none. A pair wins a tie with a single (more sequences placed while long ones are there to take them); among pairs
// the one with the longer first member.
struct Fill {
  int64_t a = 0, b = 0, sum = 0;
};
Fill best_fill(LengthsLeft& left, int64_t room, bool pair) {
  Fill best;
  if (const int64_t a = left.at_most(room); a > 0) best = {a, 0, a};
  if (!pair) return best;
  for (int64_t a = left.at_most(room); a > 0 && 2 * a >= best.sum; a = left.at_most(a - 1)) {
    --left[a];  // b may be another sequence of a's length
    const int64_t b = left.at_most(std::min(a, room - a));
    ++left[a];
    if (b > 0 && (a + b > best.sum || (a + b == best.sum && best.b == 0))) best = {a, b, a + b};
  }
  return best;
}

}  // namespace

std::vector<std::vector<uint32_t>> pack_best_fit(const std::vector<int32_t>& lengths, int64_t row_length,
                                                 int max_per_pack) {
  const std::vector<std::vector<uint32_t>> of = by_length(lengths, row_length, max_per_pack);
  std::vector<std::vector<uint32_t>> packs;
  // The open rows by the room left in them; the most recently filled first.
  std::vector<std::vector<uint32_t>> open(static_cast<size_t>(row_length) + 1);
  std::vector<int64_t> room;  // per row
  for (int64_t length = row_length; length >= 1; --length) {
    for (const uint32_t sequence : of[static_cast<size_t>(length)]) {
      int64_t fit = length;
      while (fit <= row_length && open[static_cast<size_t>(fit)].empty()) ++fit;
      uint32_t row;
      if (fit <= row_length) {  // the tightest open row it fits in
        row = open[static_cast<size_t>(fit)].back();
        open[static_cast<size_t>(fit)].pop_back();
      } else {
        row = static_cast<uint32_t>(packs.size());
        packs.emplace_back();
        room.push_back(row_length);
      }
      packs[row].push_back(sequence);
      room[row] -= length;
      if (static_cast<int>(packs[row].size()) < max_per_pack && room[row] > 0)
        open[static_cast<size_t>(room[row])].push_back(row);
    }
  }
  return packs;
}

std::vector<std::vector<uint32_t>> pack_gap_filling(const std::vector<int32_t>& lengths, int64_t row_length,
                                                    int max_per_pack) {
  const std::vector<std::vector<uint32_t>> of = by_length(lengths, row_length, max_per_pack);
  LengthsLeft left(of);
  std::vector<size_t> next(of.size(), 0);  // per length: its first sequence not yet placed
  std::vector<std::vector<uint32_t>> packs;
  std::vector<int64_t> shape;
  for (int64_t longest = left.at_most(row_length); longest > 0; longest = left.at_most(row_length)) {
    // One row's shape: the longest sequence left, then its room filled a pair at a time.
    shape.assign(1, longest);
    --left[longest];
    int64_t room = row_length - longest;
    for (int slots = max_per_pack - 1; slots > 0 && room > 0;) {
      const Fill fill = best_fill(left, room, slots >= 2);
      if (fill.a == 0) break;
      for (const int64_t l : {fill.a, fill.b})
        if (l > 0) {
          shape.push_back(l);
          --left[l];
          --slots;
        }
      room -= fill.sum;
    }
    // The same shape again while its lengths last: the same choices would be made.
    int64_t repeat = std::numeric_limits<int64_t>::max();
    for (const int64_t l : shape) repeat = std::min(repeat, left[l] / std::count(shape.begin(), shape.end(), l));
    for (const int64_t l : shape) left[l] -= repeat;
    for (int64_t r = 0; r <= repeat; ++r) {
      std::vector<uint32_t>& row = packs.emplace_back();
      for (const int64_t l : shape) row.push_back(of[static_cast<size_t>(l)][next[static_cast<size_t>(l)]++]);
    }
    left.refresh();
  }
  return packs;
}

std::vector<std::vector<uint32_t>> pack_sequences(const std::vector<int32_t>& lengths, int64_t row_length,
                                                  int max_per_pack) {
  std::vector<std::vector<uint32_t>> best_fit = pack_best_fit(lengths, row_length, max_per_pack);
  std::vector<std::vector<uint32_t>> gap_filling = pack_gap_filling(lengths, row_length, max_per_pack);
  return gap_filling.size() < best_fit.size() ? std::move(gap_filling) : std::move(best_fit);
}

int64_t packed_max_predictions(int64_t max_predictions, int max_per_pack) { return max_predictions * max_per_pack; }

nlohmann::json packing_record(int max_per_pack, const std::string& algorithm, int64_t sequences, int64_t rows,
                              int64_t real_tokens, int64_t seq_len) {
  const double tokens = static_cast<double>(real_tokens), row = static_cast<double>(seq_len);
  return {{"max_per_pack", max_per_pack},
          {"algorithm", algorithm},
          {"sequences", sequences},
          {"rows_before", sequences},
          {"rows_after", rows},
          {"real_tokens", real_tokens},
          {"efficiency_before", tokens / (static_cast<double>(sequences) * row)},
          {"efficiency_after", tokens / (static_cast<double>(rows) * row)}};
}

bool is_nvidia_packed_shard(const std::string& path) {
  quiet_hdf5_on_this_thread();
  if (H5Fis_hdf5(path.c_str()) <= 0) return false;
  Hdf5Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!file.valid() || H5Lexists(file.get(), "input_ids", H5P_DEFAULT) <= 0) return false;
  Hdf5Handle ds(H5Dopen2(file.get(), "input_ids", H5P_DEFAULT));
  if (!ds.valid()) return false;
  Hdf5Handle type(H5Dget_type(ds.get()));
  return type.valid() && H5Tget_class(type.get()) == H5T_VLEN;
}

SequenceView sequence_of(const HostBatch& rows, int64_t row) {
  SequenceView s;
  const int64_t len = rows.seq_len, preds = rows.max_predictions;
  s.input_ids = rows.input_ids.data() + row * len;
  s.segment_ids = rows.segment_ids.data() + row * len;
  const int32_t* mask = rows.input_mask.data() + row * len;
  s.length = static_cast<int32_t>(std::count(mask, mask + len, 1));
  s.masked_positions = rows.masked_positions.data() + row * preds;
  s.masked_ids = rows.masked_ids.data() + row * preds;
  while (s.masked < preds && s.masked_positions[s.masked] != 0) ++s.masked;
  s.next_sentence_label = rows.next_sentence_labels[static_cast<size_t>(row)];
  return s;
}

void write_packed_row(const SequenceView* sequences, int count, HostBatch& to, int64_t row) {
  const int64_t len = to.seq_len, preds = to.max_predictions, k_max = to.pack;
  if (count > k_max) throw joule::InternalError("write_packed_row: more sequences than the row's slots");
  int32_t* ids = to.input_ids.data() + row * len;
  int32_t* mask = to.input_mask.data() + row * len;
  int32_t* segments = to.segment_ids.data() + row * len;
  int32_t* positions = to.masked_positions.data() + row * preds;
  int32_t* masked_ids = to.masked_ids.data() + row * preds;
  int32_t* labels = to.next_sentence_labels.data() + row * k_max;
  int32_t* lengths = to.sequence_lengths.data() + row * k_max;
  int32_t* masked = to.masked_lengths.data() + row * k_max;
  int64_t at = 0, slot = 0;
  for (int k = 0; k < count; ++k) {
    const SequenceView& s = sequences[k];
    if (at + s.length > len || slot + s.masked > preds)
      throw joule::InternalError("write_packed_row: the sequences overflow the row");
    std::copy_n(s.input_ids, s.length, ids + at);
    std::fill_n(mask + at, s.length, 1);
    if (s.segment_ids != nullptr) {
      std::copy_n(s.segment_ids, s.length, segments + at);
    } else {
      std::fill_n(segments + at, s.segment_b, 0);
      std::fill_n(segments + at + s.segment_b, s.length - s.segment_b, 1);
    }
    for (int32_t i = 0; i < s.masked; ++i) positions[slot + i] = static_cast<int32_t>(at) + s.masked_positions[i];
    std::copy_n(s.masked_ids, s.masked, masked_ids + slot);
    labels[k] = s.next_sentence_label;
    lengths[k] = s.length;
    masked[k] = s.masked;
    at += s.length;
    slot += s.masked;
  }
  std::fill(ids + at, ids + len, 0);
  std::fill(mask + at, mask + len, 0);
  std::fill(segments + at, segments + len, 0);
  std::fill(positions + slot, positions + preds, 0);
  std::fill(masked_ids + slot, masked_ids + preds, 0);
  std::fill(labels + count, labels + k_max, 0);
  std::fill(lengths + count, lengths + k_max, 0);
  std::fill(masked + count, masked + k_max, 0);
}

namespace {

// One variable-length dataset's rows, each widened to int32, in memory.
std::vector<std::vector<int32_t>> read_ragged(hid_t file, const std::string& path, const char* name) {
  if (H5Lexists(file, name, H5P_DEFAULT) <= 0)
    throw ShardError(
        path + ": dataset '" + name +
        "' missing (NVIDIA's packed shards have input_ids, segment_ids, "
        "masked_lm_positions, masked_lm_ids, next_sentence_labels, packed_input_len, packed_masked_lm_len)");
  Hdf5Handle ds(H5_CHECK(H5Dopen2(file, name, H5P_DEFAULT), path));
  Hdf5Handle type(H5_CHECK(H5Dget_type(ds.get()), path));
  if (H5Tget_class(type.get()) != H5T_VLEN)
    throw ShardError(path + ": dataset '" + name + "': expected variable-length rows like input_ids");
  Hdf5Handle space(H5_CHECK(H5Dget_space(ds.get()), path));
  if (H5Sget_simple_extent_ndims(space.get()) != 1)
    throw ShardError(path + ": dataset '" + name + "': expected one variable-length row a pack ([N])");
  hsize_t rows = 0;
  H5Sget_simple_extent_dims(space.get(), &rows, nullptr);
  Hdf5Handle memory(H5_CHECK(H5Tvlen_create(H5T_NATIVE_INT32), path));
  std::vector<hvl_t> raw(static_cast<size_t>(rows));
  if (rows > 0 && H5Dread(ds.get(), memory.get(), H5S_ALL, H5S_ALL, H5P_DEFAULT, raw.data()) < 0)
    throw ShardError(path + ": dataset '" + name + "': read failed (corrupt or truncated file?)");
  std::vector<std::vector<int32_t>> out(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) {
    const auto* p = static_cast<const int32_t*>(raw[i].p);
    out[i].assign(p, p + raw[i].len);
  }
  if (rows > 0) H5Dvlen_reclaim(memory.get(), space.get(), H5P_DEFAULT, raw.data());
  return out;
}

struct ShardCounts {
  int64_t rows_before = 0, rows_after = 0, real_tokens = 0;
};

// One unpacked shard packed into `out`: read whole, packed, the rows shuffled, written a slice at a time.
ShardCounts pack_shard(const ShardEntry& shard, const std::string& out, int max_per_pack, uint64_t seed, int threads) {
  ShardReader reader(shard.path);
  HostBatch in;
  reader.read_range(0, reader.sequences(), in);
  std::vector<int32_t> lengths(static_cast<size_t>(in.rows));
  ShardCounts counts;
  counts.rows_before = in.rows;
  for (int64_t r = 0; r < in.rows; ++r) {
    lengths[static_cast<size_t>(r)] = sequence_of(in, r).length;
    counts.real_tokens += lengths[static_cast<size_t>(r)];
  }
  std::vector<std::vector<uint32_t>> packs = pack_sequences(lengths, in.seq_len, max_per_pack);
  Rng(seed).shuffle(packs);  // the longest-first order would put rows of one shape together
  counts.rows_after = static_cast<int64_t>(packs.size());
  const int64_t preds = packed_max_predictions(in.max_predictions, max_per_pack);
  ShardWriter writer(out, counts.rows_after, in.seq_len, preds, 64, threads, max_per_pack);
  constexpr size_t kSlice = 8192;
  HostBatch slice;
  std::vector<SequenceView> views;
  for (size_t begin = 0; begin < packs.size(); begin += kSlice) {
    const size_t end = std::min(packs.size(), begin + kSlice);
    slice.resize_for_overwrite(static_cast<int64_t>(end - begin), in.seq_len, preds, max_per_pack);
    for (size_t p = begin; p < end; ++p) {
      views.clear();
      for (const uint32_t s : packs[p]) views.push_back(sequence_of(in, s));
      write_packed_row(views.data(), static_cast<int>(views.size()), slice, static_cast<int64_t>(p - begin));
    }
    writer.append(slice);
  }
  writer.commit();
  return counts;
}

// IN's train and eval shards: a `joule data create` directory's train/ and eval/, or any other spec as train.
struct Source {
  std::string train, eval, vocab;
  nlohmann::json metadata;  // the data set's metadata.json, or null
};

Source source_of(const std::string& in) {
  Source s;
  const fs::path meta = fs::path(in) / "metadata.json";
  std::error_code ec;
  if (fs::is_directory(fs::path(in) / "train", ec) && fs::is_regular_file(meta, ec)) {
    s.train = (fs::path(in) / "train").string();
    if (fs::is_directory(fs::path(in) / "eval", ec)) s.eval = (fs::path(in) / "eval").string();
    try {
      s.metadata = nlohmann::json::parse(joule::read_text_file(meta.string()));
    } catch (const nlohmann::json::exception& e) {
      throw ShardError(meta.string() + ": not JSON (" + e.what() + ")",
                       "the data set's metadata is damaged: make it again with `joule data create --replace`");
    }
  } else {
    s.train = in;
  }
  s.vocab = find_vocab_beside(s.train);
  return s;
}

void refuse_packed(const Dataset& d) {
  if (d.pack() > 0)
    throw joule::UsageError("data pack: " + d.shards().front().path + " is already packed (up to " +
                                std::to_string(d.pack()) + " sequences a row)",
                            "give data pack the unpacked shards the packed ones were made from");
}

// What a pack run makes: the output shards, one for each input shard (`make` writes shard `index` of `split` to
// `path` and returns its counts), then metadata.json; resumable through PartialDataSet.
struct PackJob {
  nlohmann::json arguments;
  std::vector<std::string> sources;  // the training shards' names, in order
  bool has_eval = false;
  int64_t seq_len = 0, max_predictions = 0;
  std::string algorithm, vocab;
  nlohmann::json vocab_size;  // null when unknown
  std::function<ShardCounts(const std::string& split, size_t index, const std::string& path)> make;
};

PackSummary summary_of(const nlohmann::json& meta) {
  PackSummary s;
  const nlohmann::json& p = meta["packing"];
  s.sequences = p["sequences"];
  s.rows_before = p["rows_before"];
  s.rows_after = p["rows_after"];
  s.real_tokens = p["real_tokens"];
  s.efficiency_before = p["efficiency_before"];
  s.efficiency_after = p["efficiency_after"];
  s.shards = meta["train_shards"];
  s.seq_len = meta["seq_len"];
  return s;
}

PackSummary run_pack_job(const PackOptions& o, const PackJob& job) {
  if (const nlohmann::json done = existing_data_set(o.out, job.arguments, o.replace, "data pack"); !done.is_null()) {
    PackSummary s = summary_of(done);
    s.already_complete = true;
    return s;
  }
  PartialDataSet out(o.out, job.arguments, o.replace, "data pack");
  nlohmann::json records = out.chunks();
  const size_t resumed = out.resumed_chunks();
  for (size_t i = resumed; i < job.sources.size(); ++i) {
    nlohmann::json record = {{"index", i}, {"source", job.sources[i]}};
    fs::create_directories(fs::path(out.dir()) / "train");
    const ShardCounts c = job.make("train", i, out.shard_path("train", static_cast<int64_t>(i)));
    record["train"] = out.shard_record("train", static_cast<int64_t>(i), c.rows_after);
    record["sequences"] = c.rows_before;
    record["real_tokens"] = c.real_tokens;
    if (i == 0 && job.has_eval) {
      fs::create_directories(fs::path(out.dir()) / "eval");
      const ShardCounts e = job.make("eval", 0, out.shard_path("eval", 0));
      record["eval"] = out.shard_record("eval", 0, e.rows_after);
      record["eval_sequences"] = e.rows_before;
    }
    out.record_chunk(record);
    records.push_back(std::move(record));
    if (o.on_progress) o.on_progress(static_cast<int64_t>(i + 1), static_cast<int64_t>(job.sources.size()));
  }
  if (!job.vocab.empty()) fs::copy_file(job.vocab, fs::path(out.dir()) / "vocab.txt");

  int64_t rows_after = 0, eval_rows = 0, eval_sequences = 0, sequences = 0, real_tokens = 0;
  for (const auto& r : records) {
    rows_after += r["train"]["sequences"].get<int64_t>();
    sequences += r["sequences"].get<int64_t>();
    real_tokens += r["real_tokens"].get<int64_t>();
    if (r.contains("eval")) {
      eval_rows += r["eval"]["sequences"].get<int64_t>();
      eval_sequences += r["eval_sequences"].get<int64_t>();
    }
  }
  nlohmann::json meta = {
      {"format", "joule-pretraining-data"},
      {"format_version", 2},
      {"seq_len", job.seq_len},
      {"max_predictions", job.max_predictions},
      {"arguments", job.arguments},
      {"chunks", records},
      {"train_shards", records.size()},
      {"train_rows", rows_after},
      {"train_sequences", sequences},
      {"eval_rows", eval_rows},
      {"eval_sequences", eval_sequences},
      {"packing", packing_record(o.max_per_pack, job.algorithm, sequences, rows_after, real_tokens, job.seq_len)}};
  if (!job.vocab_size.is_null()) meta["vocab_size"] = job.vocab_size;
  out.finish(meta);
  PackSummary s = summary_of(meta);
  s.resumed_shards = static_cast<int64_t>(resumed);
  s.notes = out.notes();
  return s;
}

// NVIDIA's MLPerf packed shards, converted one by one as they are packed.
PackJob nvidia_job(const PackOptions& o, const std::vector<std::string>& files, const std::string& vocab) {
  PackJob job;
  nlohmann::json inputs = nlohmann::json::array();
  for (const std::string& f : files) {
    std::error_code ec;
    inputs.push_back({{"path", fs::absolute(f).lexically_normal().string()}, {"bytes", fs::file_size(f, ec)}});
    job.sources.push_back(fs::path(f).filename().string());
  }
  job.arguments = {{"convert",
                    {{"from", "NVIDIA MLPerf packed"},
                     {"inputs", inputs},
                     {"seq_len", o.seq_len},
                     {"max_predictions", o.max_predictions},
                     {"max_per_pack", o.max_per_pack}}}};
  job.seq_len = o.seq_len;
  job.max_predictions = o.max_predictions;
  job.algorithm = "NVIDIA's own packing (converted as packed)";
  job.vocab = vocab;
  job.make = [&o, files](const std::string&, size_t index, const std::string& path) {
    const HostBatch rows = read_nvidia_packed(files[index], o.seq_len, o.max_per_pack, o.max_predictions);
    ShardWriter writer(path, rows.rows, rows.seq_len, rows.max_predictions, 64, o.threads, rows.pack);
    writer.append(rows);
    writer.commit();
    try {
      validate_shard(path);
    } catch (const ShardError& e) {
      std::error_code ec;
      fs::remove(path, ec);
      throw ShardError(files[index] + ": converted, its packs do not hold together: " + e.what(), e.hint());
    }
    ShardCounts c;
    c.rows_after = rows.rows;
    for (int64_t r = 0; r < rows.rows; ++r) c.rows_before += rows.sequences_in(r);
    c.real_tokens = std::count(rows.input_mask.begin(), rows.input_mask.end(), 1);
    return c;
  };
  return job;
}

}  // namespace

HostBatch read_nvidia_packed(const std::string& path, int64_t seq_len, int max_per_pack, int64_t max_predictions) {
  quiet_hdf5_on_this_thread();
  if (H5Fis_hdf5(path.c_str()) <= 0) throw ShardError(path + ": not an HDF5 file (truncated or another format?)");
  Hdf5Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT));
  if (!file.valid()) throw ShardError(path + ": cannot open as HDF5 (truncated or corrupt?)");
  enum { kIds, kSegments, kPositions, kMaskedIds, kLabels, kLengths, kMaskedLengths };
  const char* names[7] = {"input_ids",           "segment_ids",          "masked_lm_positions",
                          "masked_lm_ids",       "next_sentence_labels", "packed_input_len",
                          "packed_masked_lm_len"};
  std::vector<std::vector<int32_t>> col[7];
  for (int c = 0; c < 7; ++c) {
    col[c] = read_ragged(file.get(), path, names[c]);
    if (col[c].size() != col[kIds].size())
      throw ShardError(path + ": dataset '" + names[c] + "' has " + std::to_string(col[c].size()) +
                       " packs but input_ids has " + std::to_string(col[kIds].size()));
  }
  const int64_t packs = static_cast<int64_t>(col[kIds].size());
  if (packs == 0) throw ShardError(path + ": empty shard (0 packs)");
  HostBatch out;
  out.resize(packs, seq_len, max_predictions, max_per_pack);
  const std::string hint =
      "give data pack the row length and slots NVIDIA packed for (--seq-len, --max-pred, "
      "--max-per-pack), or leave the shard out";
  for (int64_t r = 0; r < packs; ++r) {
    const auto at = [&](int c) -> const std::vector<int32_t>& { return col[c][static_cast<size_t>(r)]; };
    const std::string where = path + ": pack " + std::to_string(r) + ": ";
    const int64_t tokens = static_cast<int64_t>(at(kIds).size()), k = static_cast<int64_t>(at(kLengths).size());
    const int64_t predictions = static_cast<int64_t>(at(kPositions).size());
    if (tokens > seq_len)
      throw ShardError(where + std::to_string(tokens) + " tokens, more than a row's " + std::to_string(seq_len), hint);
    if (k > max_per_pack)
      throw ShardError(
          where + std::to_string(k) + " sequences, more than --max-per-pack " + std::to_string(max_per_pack), hint);
    if (predictions > max_predictions)
      throw ShardError(
          where + std::to_string(predictions) + " predictions, more than --max-pred " + std::to_string(max_predictions),
          hint);
    if (static_cast<int64_t>(at(kSegments).size()) != tokens ||
        static_cast<int64_t>(at(kMaskedIds).size()) != predictions || static_cast<int64_t>(at(kLabels).size()) != k ||
        static_cast<int64_t>(at(kMaskedLengths).size()) != k)
      throw ShardError(where + "its datasets disagree: " + std::to_string(tokens) + " input_ids, " +
                       std::to_string(at(kSegments).size()) + " segment_ids, " + std::to_string(predictions) +
                       " masked_lm_positions, " + std::to_string(at(kMaskedIds).size()) + " masked_lm_ids, " +
                       std::to_string(k) + " packed_input_len, " + std::to_string(at(kLabels).size()) +
                       " next_sentence_labels, " + std::to_string(at(kMaskedLengths).size()) + " packed_masked_lm_len");
    int64_t sum = 0, masked = 0;
    for (int64_t j = 0; j < k; ++j) {
      sum += at(kLengths)[static_cast<size_t>(j)];
      masked += at(kMaskedLengths)[static_cast<size_t>(j)];
    }
    if (sum != tokens || masked != predictions)
      throw ShardError(where + "packed_input_len adds up to " + std::to_string(sum) + " tokens of " +
                       std::to_string(tokens) + ", packed_masked_lm_len to " + std::to_string(masked) +
                       " predictions of " + std::to_string(predictions));
    std::copy(at(kIds).begin(), at(kIds).end(), out.input_ids.begin() + r * seq_len);
    std::fill_n(out.input_mask.begin() + r * seq_len, tokens, 1);
    std::copy(at(kSegments).begin(), at(kSegments).end(), out.segment_ids.begin() + r * seq_len);
    std::copy(at(kPositions).begin(), at(kPositions).end(), out.masked_positions.begin() + r * max_predictions);
    std::copy(at(kMaskedIds).begin(), at(kMaskedIds).end(), out.masked_ids.begin() + r * max_predictions);
    std::copy(at(kLabels).begin(), at(kLabels).end(), out.next_sentence_labels.begin() + r * max_per_pack);
    std::copy(at(kLengths).begin(), at(kLengths).end(), out.sequence_lengths.begin() + r * max_per_pack);
    std::copy(at(kMaskedLengths).begin(), at(kMaskedLengths).end(), out.masked_lengths.begin() + r * max_per_pack);
  }
  return out;
}

PackSummary pack_data_set(const PackOptions& o) {
  if (o.max_per_pack < 1 || o.max_per_pack > 64)
    throw joule::UsageError("data pack: --max-per-pack must be in [1, 64], got " + std::to_string(o.max_per_pack));
  const Source source = source_of(o.in);
  if (const std::vector<std::string> files = shard_files(source.train); is_nvidia_packed_shard(files.front()))
    return run_pack_job(o, nvidia_job(o, files, source.vocab));
  const Dataset train = Dataset::open(source.train);
  refuse_packed(train);
  std::optional<Dataset> eval;
  if (!source.eval.empty()) {
    eval = Dataset::open(source.eval);
    refuse_packed(*eval);
    if (eval->shards().size() != 1)
      throw joule::UsageError("data pack: " + source.eval + " holds " + std::to_string(eval->shards().size()) +
                              " shards; a data set's eval/ holds one");
  }
  PackJob job;
  job.arguments = source.metadata.is_object()
                      ? json_field_or<nlohmann::json>(source.metadata, "arguments", nlohmann::json::object(),
                                                      o.in + "/metadata.json")
                      : nlohmann::json::object();
  job.arguments["pack"] = {{"source", train.digest()},
                           {"source_eval", eval ? eval->digest() : ""},
                           {"max_per_pack", o.max_per_pack},
                           {"seed", o.seed}};
  for (const ShardEntry& e : train.shards()) job.sources.push_back(e.name);
  job.has_eval = eval.has_value();
  job.seq_len = train.seq_len();
  job.max_predictions = packed_max_predictions(train.max_predictions(), o.max_per_pack);
  job.algorithm = std::string(kPackingAlgorithm) + ", each shard on its own";
  job.vocab = source.vocab;
  if (source.metadata.is_object() && source.metadata.contains("vocab_size"))
    job.vocab_size = source.metadata["vocab_size"];
  job.make = [&](const std::string& split, size_t index, const std::string& path) {
    const bool is_eval = split == "eval";
    return pack_shard(is_eval ? eval->shards().front() : train.shards()[index], path, o.max_per_pack,
                      is_eval ? mix_seed(o.seed, 0, 1) : mix_seed(o.seed, index), o.threads);
  };
  return run_pack_job(o, job);
}

}  // namespace joule::data
