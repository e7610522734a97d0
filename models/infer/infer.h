// `joule infer`: batch inference of a classification model directory (models/encoder_model.h) over a JSONL file.
//
// Input, one JSON object a line:
//   text models     {"text": "...", "text_pair": "..." (optional), "id": anything (optional, echoed)}
//   LayoutLM models {"words": ["..."], "boxes": [[x0, y0, x1, y1], ...], "page": [width, height] (optional), "id": ...}
//                   boxes in the page's pixels when "page" is given (normalized to LayoutLM's 0-1000 space as its
//                   authors do: 1000 * x / width), else already in 0-1000.
// Output, one line per input line in input order: {"line": N, "id": ..., "label": ..., "score": ...} for a sequence
// classifier; {"line": N, "id": ..., "tokens": [...], "labels": [...], "scores": [...]} for a token classifier (per
// word for LayoutLM's words: its first piece's label). A line that cannot be read is reported with its number and
// either skipped (a {"line": N, "error": "..."} line stands in its place) or refuses the whole file, by option.
// Lines are tokenized with the directory's vocab.txt, sorted by length into batches that waste little padding, and
// run with every thread; the output is written atomically (all of it or nothing), byte for byte the same for the same
// input file (a line's scores may differ in the last bits in another file, where it shares a batch with other lines).
// A word or text that tokenizes to nothing (empty, whitespace) gets a null label.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "models/encoder_model.h"
#include "models/infer/classifier.h"
#include "models/infer/infer_options.h"
#include "models/precision.h"

namespace joule::models::infer {

struct InferSummary {
  int64_t lines = 0, inferred = 0, skipped = 0, truncated = 0, batches = 0;
  int64_t tokens = 0, padded_tokens = 0;  // real tokens and the padding the batches carried
  double seconds = 0;                     // the model's forward passes
  std::string precision_reason;
  std::string loading_notes;  // what loading the model said, one line each
};

InferSummary run_inference(const InferOptions& options);

// The precision policy (`--precision`: auto, fp32, bf16, as in training) applied to an inference model on this CPU:
// the choice and its reason, and the fp32 GEMM path this process judged best (launch::choose_gemm_path measures it:
// once per command); in bf16 the weights are held in bf16. What `joule infer`, `joule bench infer` and `joule model
// forward` all do. Where the weights were packed for oneDNN, the reason says so (how many, how much memory).
struct InferencePrecision {
  PrecisionChoice choice;
  launch::Fp32Gemm fp32_gemm;
};
InferencePrecision use_precision(EncoderModel& model, PrecisionSetting policy);

}  // namespace joule::models::infer
