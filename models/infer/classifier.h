// A classifier directory (models/encoder_model.h's classes, with its vocab.txt) loaded once and run on batches of
// examples: what `joule infer` runs over a JSONL file (infer.h) and `joule serve` over requests. Without LibTorch in
// its interface.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launch/util/error.h"
#include "models/precision.h"

namespace joule::models::infer {

class InputError : public joule::Error {
 public:
  explicit InputError(const std::string& message,
                      std::string hint = "fix that line, or pass --skip-bad-lines to report and skip such lines")
      : joule::Error(message, std::move(hint)) {}
};

// What loading a classifier takes: the model directory and how to run it.
struct ClassifierOptions {
  std::string model_dir;
  std::string architecture;  // empty: config.json's
  PrecisionSetting precision = PrecisionSetting::automatic;
  int64_t max_length = 0;          // 0: the model's max_position_embeddings (at most 512)
  int threads = 0;                 // 0: every core
  std::optional<bool> lower_case;  // unset: tokenizer_config.json's do_lower_case, else lower-case
  bool allow_initialized = false;  // run a classifier whose head (or pooler) the directory lacks
};

// One input (a JSONL line, or one example of a served request), tokenized: [CLS] ... [SEP] (... [SEP]) with its
// segments and, for LayoutLM, each token's box and the word it came from (-1 for [CLS]/[SEP]).
struct Example {
  int64_t line = 0;   // echoed as "line" in the result
  nlohmann::json id;  // echoed as "id" when not null
  std::vector<int32_t> ids, segments;
  std::vector<std::array<int64_t, 4>> boxes;
  std::vector<int64_t> word_of;  // LayoutLM: per token
  int64_t words = 0;             // LayoutLM: words given
  bool truncated = false;
};

// A classifier directory loaded once and run on batches of examples: what `joule infer` runs over a file and
// `joule serve` over requests. Loading refuses a directory without a classification head or a tokenizer (or with an
// untrained head unless allowed) with the error that names what is missing.
class Classifier {
 public:
  explicit Classifier(const ClassifierOptions& options);
  ~Classifier();
  Classifier(const Classifier&) = delete;
  Classifier& operator=(const Classifier&) = delete;

  // An input object ({"text": ...} or {"words": ..., "boxes": ...}, as infer.h describes the lines) tokenized;
  // InputError naming the key and the value otherwise. read_line parses the text first (UTF-8, JSON, an object).
  Example read(const nlohmann::json& object) const;
  Example read_line(const std::string& text) const;

  // One forward pass over `batch` (padded to its longest example): each example's result object, in order.
  struct Results {
    std::vector<nlohmann::json> objects;
    int64_t tokens = 0, padded_tokens = 0;
    double seconds = 0;  // the forward pass
  };
  Results classify(const std::vector<const Example*>& batch);

  bool layout() const;      // LayoutLM: words and boxes in, per word out
  bool token_head() const;  // ...ForTokenClassification: per token (per word) out; else one label per example
  const std::string& architecture() const;      // HuggingFace's class name
  int64_t max_length() const;                   // tokens per example at most
  const std::string& loading_notes() const;     // "note: ..." lines from loading the model
  const std::string& precision_reason() const;  // the precision in use and why
  const std::string& precision() const;         // the precision in use: "fp32" or "bf16"
  int threads() const;                          // intra-op threads the forward passes run on

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace joule::models::infer
