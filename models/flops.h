// The work of one BERT training step, GEMM by GEMM (forward, input gradients, weight gradients),
// attention included: the FLOP count behind MFU, the sgemm roofline and the cluster performance model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/bert_config.h"

namespace joule::models {

struct GemmShape {
  std::string what;  // "layer.qkv_out.fwd", "attention.scores.dgrad", ...
  int64_t batch = 1, m = 0, n = 0, k = 0;
  int64_t count = 1;  // how many times per training step
  double flops() const { return 2.0 * batch * m * n * k * count; }
};

// Every GEMM of one training step for `sequences` sequences of `seq_len` tokens with `predictions` masked
// positions in total (the masked-only MLM head).
std::vector<GemmShape> training_gemms(const BertConfig& config, int64_t sequences, int64_t seq_len,
                                      int64_t predictions);
double total_flops(const std::vector<GemmShape>& gemms);

// GEMM FLOPs to train on one sequence (forward + backward), `predictions` masked positions per sequence.
double training_flops_per_sequence(const BertConfig& config, int64_t seq_len, int64_t predictions);

// Every GEMM of one inference forward pass of the encoder for `sequences` sequences of `seq_len` tokens, with the
// pooler and a classifier of `labels` outputs on the pooled state, or on every token (`per_token`); labels 0: none.
// `first_position_last_layer`: the last layer computes only the first position after its key and value projections
// (models/encoder_model.h Outputs::kLogits with a sequence head; ignored with `per_token`).
std::vector<GemmShape> inference_gemms(const BertConfig& config, int64_t sequences, int64_t seq_len, int64_t labels,
                                       bool per_token, bool first_position_last_layer = false);

}  // namespace joule::models
