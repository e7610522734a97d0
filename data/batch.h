// The batch the data layer hands to the model: NVIDIA DeepLearningExamples' layout as int64 tensors. A packed batch's
// rows hold up to K sequences each, one after another from position 0 (data/shard.h).
#pragma once

#include <torch/torch.h>

#include <optional>
#include <vector>

#include "data/shuffle.h"

namespace joule::data {

// What a run's loader knows of a batch's rows: row r is row `first_row + r` of the run's stream of rows (the same
// row whatever the rank layout; data/shuffle.h), drawn under `seed`; `sources` are the shards' rows, in batch order.
struct BatchRows {
  uint64_t seed = 0;
  uint64_t first_row = 0;
  std::vector<RowRun> sources;
};

struct PretrainingBatch {
  torch::Tensor input_ids;             // [B, L]
  torch::Tensor token_type_ids;        // [B, L] (the shards' segment_ids)
  torch::Tensor attention_mask;        // [B, L], 1 for real tokens, 0 for padding (input_mask)
  torch::Tensor masked_positions;      // [B, P]; the first 0 ends a row's predictions (position 0 is [CLS])
  torch::Tensor masked_ids;            // [B, P], the original token at each masked position
  torch::Tensor next_sentence_labels;  // [B] (packed: [B, K], one a sequence), 0 = is next, 1 = random
  torch::Tensor sequence_lengths;      // packed only: [B, K], each sequence's length, 0 after a row's last
  int64_t packed_sequences = 0;        // packed only: the sequences in the rows, known on the host
  // A run's batches (data/loader.h): their rows key the dropout masks (models/dropout.h) and are named when a step's
  // loss is NaN/Inf. Unset in batches made elsewhere (tests, benchmarks).
  std::optional<BatchRows> rows;

  bool packed() const { return sequence_lengths.defined(); }
  int64_t sequence_count() const { return packed() ? packed_sequences : input_ids.size(0); }
  // The same batch on `device`: one host-to-device copy per tensor.
  PretrainingBatch to(const torch::Device& device) const {
    return {input_ids.to(device),
            token_type_ids.to(device),
            attention_mask.to(device),
            masked_positions.to(device),
            masked_ids.to(device),
            next_sentence_labels.to(device),
            packed() ? sequence_lengths.to(device) : torch::Tensor(),
            packed_sequences,
            rows};
  }
};

}  // namespace joule::data
