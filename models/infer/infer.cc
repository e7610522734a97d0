#include "models/infer/infer.h"

#include <algorithm>
#include <fstream>
#include <numeric>

#include <nlohmann/json.hpp>

#include "launch/runtime.h"
#include "launch/util/file_io.h"
#include "models/precision.h"

namespace joule::models::infer {

using nlohmann::json;

InferencePrecision use_precision(EncoderModel& model, PrecisionSetting policy) {
  InferencePrecision used{choose_precision(policy, false, launch::CpuIsa::current()),
                          launch::choose_gemm_path(launch::Fp32GemmSetting::automatic).choice.fp32};
  model.set_precision(used.choice.precision, used.fp32_gemm);
  if (const PackedWeights* packed = model.packed_weights())  // which GEMM path runs, said with the precision
    used.choice.reason += "; " + std::to_string(packed->size()) + " weights packed for oneDNN's GEMMs (" +
                          std::to_string((packed->bytes() + (1 << 19)) >> 20) + " MiB)";
  return used;
}

InferSummary run_inference(const InferOptions& o) {
  if (o.batch < 1) throw joule::UsageError("--batch must be at least 1");
  // The output's temporary file first: a directory that cannot hold it fails before any work.
  joule::AtomicFile out(o.output);
  Classifier classifier(o);
  InferSummary s;
  s.loading_notes = classifier.loading_notes();
  s.precision_reason = classifier.precision_reason();

  // Read every line first: a bad line is found before any work, and the batches are sorted by length.
  std::ifstream in(o.input);
  if (!in) throw joule::IoError("cannot read " + o.input, "give --input an existing JSONL file");
  std::vector<Example> examples;
  std::vector<json> errors;  // per skipped line
  std::string text;
  for (int64_t line = 1; std::getline(in, text); ++line) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    ++s.lines;
    try {
      examples.push_back(classifier.read_line(text));
      examples.back().line = line;
    } catch (const InputError& e) {
      const std::string what = o.input + ":" + std::to_string(line) + ": " + e.what();
      if (!o.skip_bad_lines) throw InputError(what);
      errors.push_back({{"line", line}, {"error", e.what()}});
      if (o.on_skip) o.on_skip("skipped " + what);
      ++s.skipped;
    }
  }
  if (s.lines == 0) throw InputError(o.input + ": no lines to classify (the file is empty or blank)");
  // Batches of similar lengths: the order by (length, line) is fixed, so the output is too.
  std::vector<size_t> order(examples.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t x, size_t y) { return examples[x].ids.size() < examples[y].ids.size(); });
  std::vector<json> results(examples.size());
  for (size_t begin = 0; begin < order.size(); begin += static_cast<size_t>(o.batch)) {
    std::vector<const Example*> batch;
    for (size_t k = begin; k < std::min(order.size(), begin + static_cast<size_t>(o.batch)); ++k)
      batch.push_back(&examples[order[k]]);
    Classifier::Results r = classifier.classify(batch);
    for (size_t k = 0; k < batch.size(); ++k) {
      results[order[begin + k]] = std::move(r.objects[k]);
      s.truncated += batch[k]->truncated ? 1 : 0;
    }
    s.seconds += r.seconds;
    s.tokens += r.tokens;
    s.padded_tokens += r.padded_tokens;
    ++s.batches;
    s.inferred += static_cast<int64_t>(batch.size());
    if (o.on_progress) o.on_progress(s.inferred, static_cast<int64_t>(examples.size()));
  }
  // In input order, each skipped line's error in its place.
  std::string body;
  size_t next_error = 0;
  for (const json& r : results) {
    while (next_error < errors.size() && errors[next_error]["line"] < r["line"])
      body += errors[next_error++].dump() + "\n";
    body += r.dump() + "\n";
  }
  while (next_error < errors.size()) body += errors[next_error++].dump() + "\n";
  out.write(body);
  out.commit();
  return s;
}

}  // namespace joule::models::infer
