// Sequence packing: several short sequences one after another in a row, so that a step computes real tokens rather
// than padding (Krell et al., "Efficient Sequence Packing without Cross-contamination", arXiv 2107.02027; NVIDIA's
// MLPerf BERT trains on such rows). The rows are the packed shards of data/shard.h; the model keeps each sequence
// apart (models/bert.h). No LibTorch here.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/shard.h"

namespace joule::data {

// Which sequences share a row: for each row, indices into `lengths`, at most `max_per_pack` of them holding at most
// `row_length` tokens. Two packers over the lengths' histogram run and the one with fewer rows wins:
// - best-fit decreasing: from the longest length down, each sequence goes to the open row with the least room that
//   still fits it, else to a new row (the histogram packing of Krell et al., arXiv 2107.02027, with best fit where
//   their shortest-pack-first takes the emptiest row). Good when a row holds many short sequences.
// - gap filling: a row starts with the longest sequence left, and its room is filled two sequences at a time by the
//   pair (or single) that leaves the least room, a pair winning ties; the same row shape repeats while its lengths
//   last. Good under a small `max_per_pack`: on Wikipedia's lengths at 512 with 3 a row it leaves ~0.5 % empty where
//   best fit leaves ~10 %.
// Deterministic: equal lengths are taken in index order. Every length must be in [1, row_length].
std::vector<std::vector<uint32_t>> pack_sequences(const std::vector<int32_t>& lengths, int64_t row_length,
                                                  int max_per_pack);
// The packers on their own (pack_sequences takes the better).
std::vector<std::vector<uint32_t>> pack_best_fit(const std::vector<int32_t>& lengths, int64_t row_length,
                                                 int max_per_pack);
std::vector<std::vector<uint32_t>> pack_gap_filling(const std::vector<int32_t>& lengths, int64_t row_length,
                                                    int max_per_pack);
// metadata.json's name for what pack_sequences does.
inline constexpr const char* kPackingAlgorithm =
    "the fewer rows of best-fit decreasing and longest-first gap filling over the length histogram";

// One sequence to place in a packed row: its tokens, their segment ids (or, where null, 0 before `segment_b` and 1
// from there), its masked predictions (positions within the sequence) and its NSP label.
struct SequenceView {
  const int32_t* input_ids = nullptr;
  const int32_t* segment_ids = nullptr;
  int32_t segment_b = 0;
  int32_t length = 0;
  const int32_t* masked_positions = nullptr;
  const int32_t* masked_ids = nullptr;
  int32_t masked = 0;
  int32_t next_sentence_label = 0;
};

// Row `row` of `to` (packed: to.pack slots) holds `count` sequences one after another from position 0; every element
// of the row is written (the rest zeros).
void write_packed_row(const SequenceView* sequences, int count, HostBatch& to, int64_t row);

// Row `row` of an unpacked batch as a sequence (its length: its input_mask's ones; its predictions: the slots before
// the first 0 position).
SequenceView sequence_of(const HostBatch& rows, int64_t row);

// metadata.json's "packing" record of a packed data set (what `joule plan --packing` reads): `sequences` of
// `real_tokens` in all, `rows` of `seq_len` tokens once packed (one a row before), by `algorithm`.
nlohmann::json packing_record(int max_per_pack, const std::string& algorithm, int64_t sequences, int64_t rows,
                              int64_t real_tokens, int64_t seq_len);

// The prediction slots a packed row needs for up to `max_per_pack` sequences of `max_predictions` each.
int64_t packed_max_predictions(int64_t max_predictions, int max_per_pack);

// NVIDIA's MLPerf packed shards (mlcommons training_results, NVIDIA's BERT input_preprocessing/packed_data): h5py
// variable-length rows, one a pack: input_ids, segment_ids, masked_lm_positions (offsets into the pack), masked_lm_ids,
// next_sentence_labels, packed_input_len and packed_masked_lm_len (one a sequence); no input_mask, no row length.
bool is_nvidia_packed_shard(const std::string& path);  // its input_ids is a variable-length dataset
// Its packs as joule's packed rows of `seq_len` tokens, `max_per_pack` sequence slots and `max_predictions` prediction
// slots. A pack longer than the row, with more sequences or predictions than the slots, or whose lengths do not add
// up to its tokens is a ShardError naming the shard and the pack.
HostBatch read_nvidia_packed(const std::string& path, int64_t seq_len, int max_per_pack, int64_t max_predictions);

// `joule data pack IN OUT`: every shard of the unpacked data set IN (any spec Dataset::open takes; NVIDIA's shards
// included) packed into OUT/NAME under the same relative name, at most `max_per_pack` sequences a row. Each shard
// packs on its own (bounded memory: one shard at a time) and its rows are shuffled with `seed`. The shards are written
// into OUT.partial and OUT.partial/progress.json records each finished one (a rerun after a kill keeps them and goes
// on); OUT appears when all are there, with metadata.json (the arguments, each shard's counts and checksum, and the
// packing efficiency before and after).
// NVIDIA's MLPerf packed shards as IN are converted to joule's packed layout as they are (not packed again): rows of
// `seq_len` tokens with `max_predictions` prediction slots.
struct PackOptions {
  std::string in, out;
  int max_per_pack = 3;
  int64_t seq_len = 512, max_predictions = 80;  // NVIDIA's packed shards only
  uint64_t seed = 12345;
  int threads = 1;
  bool replace = false;
  std::function<void(int64_t shards_done, int64_t of)> on_progress;  // after each shard (a progress line); may be empty
};

struct PackSummary {
  int64_t sequences = 0, rows_before = 0, rows_after = 0, real_tokens = 0, seq_len = 0;
  int64_t shards = 0, resumed_shards = 0;
  double efficiency_before = 0, efficiency_after = 0;  // real tokens / the rows' tokens
  bool already_complete = false;
  std::vector<std::string> notes;
};

PackSummary pack_data_set(const PackOptions& options);

}  // namespace joule::data
