#include "data/pack.h"

#include <algorithm>
#include <filesystem>
#include <optional>

#include <nlohmann/json.hpp>

#include "data/create.h"
#include "data/create_output.h"
#include "data/dataset.h"
#include "launch/util/error.h"
#include "launch/util/file_io.h"
#include "launch/util/json_field.h"

namespace joule::data {
namespace fs = std::filesystem;

std::vector<std::vector<uint32_t>> pack_sequences(const std::vector<int32_t>& lengths, int64_t row_length,
                                                  int max_per_pack) {
  if (max_per_pack < 1) throw joule::InternalError("pack_sequences: max_per_pack < 1");
  // The sequences by length, longest first; equal lengths in index order (a counting sort: lengths are small).
  std::vector<std::vector<uint32_t>> by_length(static_cast<size_t>(row_length) + 1);
  for (size_t i = 0; i < lengths.size(); ++i) {
    if (lengths[i] < 1 || lengths[i] > row_length)
      throw joule::InternalError("pack_sequences: length " + std::to_string(lengths[i]) + " outside [1, " +
                                 std::to_string(row_length) + "]");
    by_length[static_cast<size_t>(lengths[i])].push_back(static_cast<uint32_t>(i));
  }
  std::vector<std::vector<uint32_t>> packs;
  // The open rows by the room left in them; the most recently filled first.
  std::vector<std::vector<uint32_t>> open(static_cast<size_t>(row_length) + 1);
  std::vector<int64_t> room;  // per row
  for (int64_t length = row_length; length >= 1; --length) {
    for (const uint32_t sequence : by_length[static_cast<size_t>(length)]) {
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

int64_t packed_max_predictions(int64_t max_predictions, int max_per_pack) { return max_predictions * max_per_pack; }

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

}  // namespace

PackSummary pack_data_set(const PackOptions& o) {
  if (o.max_per_pack < 1 || o.max_per_pack > 64)
    throw joule::UsageError("data pack: --max-per-pack must be in [1, 64], got " + std::to_string(o.max_per_pack));
  const Source source = source_of(o.in);
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
  nlohmann::json arguments = source.metadata.is_object()
                                 ? json_field_or<nlohmann::json>(source.metadata, "arguments", nlohmann::json::object(),
                                                                 o.in + "/metadata.json")
                                 : nlohmann::json::object();
  arguments["pack"] = {{"source", train.digest()},
                       {"source_eval", eval ? eval->digest() : ""},
                       {"max_per_pack", o.max_per_pack},
                       {"seed", o.seed}};

  PackSummary summary;
  summary.seq_len = train.seq_len();
  auto add_totals = [&](const nlohmann::json& meta) {
    const nlohmann::json& p = meta["packing"];
    summary.sequences = p["sequences"];
    summary.rows_before = p["rows_before"];
    summary.rows_after = p["rows_after"];
    summary.real_tokens = p["real_tokens"];
    summary.efficiency_before = p["efficiency_before"];
    summary.efficiency_after = p["efficiency_after"];
    summary.shards = meta["train_shards"];
  };
  if (const nlohmann::json done = existing_data_set(o.out, arguments, o.replace, "data pack"); !done.is_null()) {
    add_totals(done);
    summary.already_complete = true;
    return summary;
  }

  PartialDataSet out(o.out, arguments, o.replace, "data pack");
  nlohmann::json records = out.chunks();
  const size_t resumed = out.resumed_chunks();
  for (size_t i = resumed; i < train.shards().size(); ++i) {
    nlohmann::json record = {{"index", i}, {"source", train.shards()[i].name}};
    const uint64_t seed = mix_seed(o.seed, i);
    fs::create_directories(fs::path(out.dir()) / "train");
    const ShardCounts c = pack_shard(train.shards()[i], out.shard_path("train", static_cast<int64_t>(i)),
                                     o.max_per_pack, seed, o.threads);
    record["train"] = out.shard_record("train", static_cast<int64_t>(i), c.rows_after);
    record["sequences"] = c.rows_before;
    record["real_tokens"] = c.real_tokens;
    if (i == 0 && eval) {
      fs::create_directories(fs::path(out.dir()) / "eval");
      const ShardCounts e = pack_shard(eval->shards().front(), out.shard_path("eval", 0), o.max_per_pack,
                                       mix_seed(o.seed, i, 1), o.threads);
      record["eval"] = out.shard_record("eval", 0, e.rows_after);
      record["eval_sequences"] = e.rows_before;
    }
    out.record_chunk(record);
    records.push_back(std::move(record));
  }
  if (!source.vocab.empty()) fs::copy_file(source.vocab, fs::path(out.dir()) / "vocab.txt");

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
  const double row_tokens = static_cast<double>(train.seq_len());
  nlohmann::json meta = {
      {"format", "joule-pretraining-data"},
      {"format_version", 2},
      {"seq_len", train.seq_len()},
      {"max_predictions", packed_max_predictions(train.max_predictions(), o.max_per_pack)},
      {"arguments", arguments},
      {"chunks", records},
      {"train_shards", records.size()},
      {"train_rows", rows_after},
      {"train_sequences", sequences},
      {"eval_rows", eval_rows},
      {"eval_sequences", eval_sequences},
      {"packing",
       {{"max_per_pack", o.max_per_pack},
        {"algorithm", "best-fit decreasing over the length histogram (shortest-pack-first), each shard on its own"},
        {"sequences", sequences},
        {"rows_before", sequences},
        {"rows_after", rows_after},
        {"real_tokens", real_tokens},
        {"efficiency_before", static_cast<double>(real_tokens) / (static_cast<double>(sequences) * row_tokens)},
        {"efficiency_after", static_cast<double>(real_tokens) / (static_cast<double>(rows_after) * row_tokens)}}}};
  if (source.metadata.is_object() && source.metadata.contains("vocab_size"))
    meta["vocab_size"] = source.metadata["vocab_size"];
  out.finish(meta);
  add_totals(meta);
  summary.resumed_shards = static_cast<int64_t>(resumed);
  summary.notes = out.notes();
  return summary;
}

}  // namespace joule::data
