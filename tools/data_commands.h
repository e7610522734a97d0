// `joule data synth|vocab|create|pack|inspect|tokenize|order`, as functions main() only calls.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

#include "data/pack.h"

namespace joule::tools {

// What `joule data pack` did: rows before and after, the packing efficiency, what it kept from an earlier run.
std::string describe_pack(const data::PackOptions& options, const data::PackSummary& summary);

// Counts, the length histogram, the masking rate, and `samples` sequences decoded back to text.
std::string data_inspect(const std::string& spec, int samples, const std::string& vocab_path);

// One line of space-separated WordPiece tokens per input line.
void data_tokenize(std::istream& in, std::ostream& out, const std::string& vocab_path, bool lower_case);
// The tokenizer's throughput on `in` (read into memory first, then encoded line by line on one thread, 3 times):
// MB/s of text and tokens/s of the median run, and the MB/s of the string path (a string per word and piece, the
// reference's shape) beside it, as one JSON line.
std::string tokenizer_speed(std::istream& in, const std::string& vocab_path, bool lower_case);

// `joule data order`: the sequences `steps` optimizer steps of a run read (any world size: the global shuffle of
// data/shuffle.h under `seed`, `global_batch` a step), as JSON for an outside implementation to train on the same
// samples in the same order: the shards with their rows, and each step's sequence ids (shards in order, rows in
// order) in stream order.
struct DataOrderOptions {
  std::string data;  // shard directory, glob, list file or `joule data create` output (its train/)
  int64_t global_batch = 0;
  int64_t steps = 0;
  uint64_t seed = 42;
};
std::string data_order(const DataOrderOptions& options);

}  // namespace joule::tools
