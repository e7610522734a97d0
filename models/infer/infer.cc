#include "models/infer/infer.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <optional>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "data/tokenizer.h"
#include "launch/cpu_isa.h"
#include "launch/runtime.h"
#include "launch/util/file_io.h"
#include "launch/util/json_field.h"
#include "launch/util/utf8.h"
#include "models/encoder_model.h"
#include "models/precision.h"

namespace joule::models::infer {
namespace {

using nlohmann::json;
using Box = std::array<int64_t, 4>;

// One input line, tokenized: [CLS] ... [SEP] (...[SEP]) with its segments and, for LayoutLM, each token's box and
// the word it came from (-1 for [CLS]/[SEP]).
struct Example {
  int64_t line = 0;
  json id;
  std::vector<int32_t> ids, segments;
  std::vector<Box> boxes;
  std::vector<int64_t> word_of;  // LayoutLM: per token
  int64_t words = 0;             // LayoutLM: words given
  bool truncated = false;
};

// The model, its tokenizer and the input's rules.
struct Context {
  const Architecture& architecture;
  const data::FullTokenizer& tokenizer;
  const data::Vocab& vocab;
  int64_t max_length;
  int64_t type_vocab_size;
};

[[noreturn]] void bad(const std::string& what) { throw InputError(what); }

double box_value(const json& v, const std::string& where) {
  if (!v.is_number()) bad(where + " must be numbers, found " + v.dump());
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < 0) bad(where + " must be non-negative, found " + v.dump());
  return x;
}

// The word boxes of a LayoutLM line, in LayoutLM's 0-1000 space.
std::vector<Box> read_boxes(const json& j, size_t words, const Context& c) {
  if (!j.contains("boxes")) bad("no \"boxes\" (a LayoutLM line: {\"words\": [...], \"boxes\": [...]})");
  const json& boxes = j.at("boxes");
  if (!boxes.is_array() || boxes.size() != words)
    bad("\"boxes\" must hold one [x0, y0, x1, y1] per word (" + std::to_string(words) + " words)");
  double width = 1000, height = 1000;
  if (j.contains("page")) {
    const json& page = j.at("page");
    if (!page.is_array() || page.size() != 2 || !page[0].is_number() || !page[1].is_number() ||
        !(page[0].get<double>() > 0) || !(page[1].get<double>() > 0))
      bad("\"page\" must be [width, height] in pixels, both positive, found " + page.dump());
    width = page[0].get<double>();
    height = page[1].get<double>();
  }
  std::vector<Box> out;
  for (size_t w = 0; w < words; ++w) {
    const json& b = boxes[w];
    const std::string where = "box " + std::to_string(w) + " (word \"" + j.at("words")[w].get<std::string>() + "\")";
    if (!b.is_array() || b.size() != 4) bad(where + " must be [x0, y0, x1, y1], found " + b.dump());
    Box box{};
    for (size_t k = 0; k < 4; ++k) {
      // LayoutLM's normalization, int(1000 * x / size), in doubles: a coordinate past the page is refused before any
      // conversion to an integer.
      const double v = std::floor(1000.0 * box_value(b[k], where) / (k % 2 == 0 ? width : height));
      if (!(v <= 1000))
        bad(where + " lies outside the page (0-1000 after normalization" +
            std::string(j.contains("page") ? " by \"page\"" : "; give \"page\": [width, height] for pixel boxes") +
            "): " + b.dump());
      box[k] = static_cast<int64_t>(v);
    }
    if (box[0] > box[2] || box[1] > box[3]) bad(where + " has x1 < x0 or y1 < y0: " + b.dump());
    out.push_back(box);
  }
  return out;
}

Example read_layout(const json& j, const Context& c) {
  const json& words = j.at("words");
  if (!words.is_array() || words.empty()) bad("\"words\" must be a non-empty list of strings");
  for (const json& w : words)
    if (!w.is_string()) bad("\"words\" must hold strings, found " + w.dump());
  const std::vector<Box> boxes = read_boxes(j, words.size(), c);
  Example e;
  e.words = static_cast<int64_t>(words.size());
  auto push = [&](int32_t id, const Box& box, int64_t word) {
    e.ids.push_back(id);
    e.segments.push_back(0);
    e.boxes.push_back(box);
    e.word_of.push_back(word);
  };
  push(c.vocab.cls_id(), {0, 0, 0, 0}, -1);  // LayoutLM's boxes for [CLS] and [SEP]
  std::vector<int32_t> pieces;
  for (size_t w = 0; w < words.size() && !e.truncated; ++w) {
    pieces.clear();
    c.tokenizer.encode(words[w].get<std::string>(), pieces);
    for (int32_t id : pieces) {
      if (static_cast<int64_t>(e.ids.size()) + 1 >= c.max_length) {
        e.truncated = true;
        break;
      }
      push(id, boxes[w], static_cast<int64_t>(w));
    }
  }
  push(c.vocab.sep_id(), {1000, 1000, 1000, 1000}, -1);
  return e;
}

Example read_text(const json& j, const Context& c) {
  auto text = [&](const char* key) -> std::optional<std::string> {
    if (!j.contains(key)) return std::nullopt;
    if (!j.at(key).is_string()) bad(std::string("\"") + key + "\" must be a string, found " + j.at(key).dump());
    return j.at(key).get<std::string>();
  };
  const auto a = text("text"), b = text("text_pair");
  if (!a) bad("no \"text\" (a text model's line: {\"text\": ..., \"text_pair\": ... optional})");
  if (b && c.type_vocab_size < 2)
    bad("a \"text_pair\" needs a model with two segments; this one's type_vocab_size is 1");
  std::vector<int32_t> first, second;
  c.tokenizer.encode(*a, first);
  if (b) c.tokenizer.encode(*b, second);
  Example e;
  // Longest first, one token at a time, a tie taken from the pair's second text: what HuggingFace tokenizers'
  // LongestFirst keeps (8 and 4 tokens in a budget of 7: 4 and 3). max_length >= 3 leaves both texts possible.
  const size_t special = b ? 3 : 2;
  while (first.size() + second.size() + special > static_cast<size_t>(c.max_length)) {
    (second.size() >= first.size() ? second : first).pop_back();
    e.truncated = true;
  }
  e.ids.push_back(c.vocab.cls_id());
  e.ids.insert(e.ids.end(), first.begin(), first.end());
  e.ids.push_back(c.vocab.sep_id());
  e.segments.assign(e.ids.size(), 0);
  if (b) {
    e.ids.insert(e.ids.end(), second.begin(), second.end());
    e.ids.push_back(c.vocab.sep_id());
    e.segments.resize(e.ids.size(), 1);
  }
  return e;
}

Example read_line(const std::string& text, int64_t line, const Context& c) {
  if (const std::string problem = joule::utf8_problem(text); !problem.empty())
    bad(problem.substr(problem.find("byte ")));  // "byte B (0xXX): not valid UTF-8": the file:line is said before it
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    bad("not JSON: " + joule::json_error_words(e));
  }
  if (!j.is_object()) bad("expected a JSON object, found " + j.dump().substr(0, 80));
  const bool layout = c.architecture.model_type == "layoutlm";
  if (layout && !j.contains("words")) bad("no \"words\" (a LayoutLM line: {\"words\": [...], \"boxes\": [...]})");
  Example e = layout ? read_layout(j, c) : read_text(j, c);
  e.line = line;
  if (j.contains("id")) e.id = j.at("id");
  return e;
}

// One batch's tensors, padded to its longest example.
EncoderInput batch_input(const std::vector<const Example*>& batch, bool layout, int32_t pad) {
  int64_t len = 0;
  for (const Example* e : batch) len = std::max<int64_t>(len, static_cast<int64_t>(e->ids.size()));
  const int64_t n = static_cast<int64_t>(batch.size());
  auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  EncoderInput in{
      torch::full({n, len}, pad, i64), torch::zeros({n, len}, i64), torch::zeros({n, len}, i64), {}, {}, {}};
  if (layout) in.bbox = torch::zeros({n, len, 4}, i64);
  auto ids = in.input_ids.accessor<int64_t, 2>(), seg = in.token_type_ids.accessor<int64_t, 2>(),
       mask = in.attention_mask.accessor<int64_t, 2>();
  std::optional<at::TensorAccessor<int64_t, 3>> box;
  if (layout) box.emplace(in.bbox.accessor<int64_t, 3>());
  for (int64_t r = 0; r < n; ++r) {
    const Example& e = *batch[static_cast<size_t>(r)];
    for (size_t t = 0; t < e.ids.size(); ++t) {
      ids[r][static_cast<int64_t>(t)] = e.ids[t];
      seg[r][static_cast<int64_t>(t)] = e.segments[t];
      mask[r][static_cast<int64_t>(t)] = 1;
      if (layout)
        for (int64_t k = 0; k < 4; ++k) (*box)[r][static_cast<int64_t>(t)][k] = e.boxes[t][static_cast<size_t>(k)];
    }
  }
  return in;
}

std::string label_name(const BertConfig& config, int64_t k) {
  return k < static_cast<int64_t>(config.labels.size()) ? config.labels[static_cast<size_t>(k)]
                                                        : "LABEL_" + std::to_string(k);
}

// The output line of one example from its row of probabilities ([labels] or [length, labels]).
json result(const Example& e, const torch::Tensor& probs, const Architecture& a, const BertConfig& config,
            const data::Vocab& vocab) {
  json out = {{"line", e.line}};
  if (!e.id.is_null()) out["id"] = e.id;
  if (a.head == Head::kSequence) {
    const auto best = probs.max(-1);
    out["label"] = label_name(config, std::get<1>(best).item<int64_t>());
    out["score"] = std::get<0>(best).item<float>();
  } else {
    const auto best = probs.max(-1);
    const torch::Tensor score = std::get<0>(best), label = std::get<1>(best);
    json tokens = json::array(), labels = json::array(), scores = json::array();
    if (a.model_type == "layoutlm") {  // per word: its first piece
      labels = json(std::vector<json>(static_cast<size_t>(e.words), nullptr));
      scores = labels;
      for (size_t t = 0; t < e.word_of.size(); ++t) {
        const int64_t w = e.word_of[t];
        if (w < 0 || !labels[static_cast<size_t>(w)].is_null()) continue;
        labels[static_cast<size_t>(w)] = label_name(config, label[static_cast<int64_t>(t)].item<int64_t>());
        scores[static_cast<size_t>(w)] = score[static_cast<int64_t>(t)].item<float>();
      }
      out["labels"] = labels;
      out["scores"] = scores;
    } else {
      for (size_t t = 1; t + 1 < e.ids.size(); ++t) {
        if (e.ids[t] == vocab.sep_id()) continue;
        tokens.push_back(vocab.token(e.ids[t]));
        labels.push_back(label_name(config, label[static_cast<int64_t>(t)].item<int64_t>()));
        scores.push_back(score[static_cast<int64_t>(t)].item<float>());
      }
      out["tokens"] = tokens;
      out["labels"] = labels;
      out["scores"] = scores;
    }
  }
  if (e.truncated) out["truncated"] = true;
  return out;
}

bool lower_case_of(const std::string& dir, bool fallback) {
  const std::string path = dir + "/tokenizer_config.json";
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return fallback;
  const json j = json::parse(joule::read_text_file(path), nullptr, /*allow_exceptions=*/false);
  return j.is_object() && j.contains("do_lower_case") && j.at("do_lower_case").is_boolean()
             ? j.at("do_lower_case").get<bool>()
             : fallback;
}

}  // namespace

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
  using Clock = std::chrono::steady_clock;
  if (o.batch < 1) throw joule::UsageError("--batch must be at least 1");
  if (o.max_length != 0 && o.max_length < 3)
    throw joule::UsageError("--max-length " + std::to_string(o.max_length) +
                            " leaves no room for text ([CLS] and one or two [SEP] take 3)");
  InferSummary s;
  std::error_code ec;
  if (!std::filesystem::exists(o.model_dir + "/vocab.txt", ec))
    throw joule::IoError(o.model_dir + " has no vocab.txt",
                         "a classifier directory for joule infer holds config.json, model.safetensors and the "
                         "vocab.txt of its tokenizer");
  LoadedEncoderModel loaded = load_encoder_model(o.model_dir, o.architecture);
  for (const std::string& n : loaded.loading_notes) s.loading_notes += "note: " + n + "\n";
  EncoderModel& model = loaded.model;
  const Architecture& a = model.architecture();
  if (a.head == Head::kNone)
    throw joule::UsageError(a.name +
                                " has no classification head: joule infer runs ...ForSequenceClassification "
                                "and ...ForTokenClassification models",
                            "give --architecture a classifier, or a fine-tuned classifier's directory");
  if (!loaded.initialized.empty() && !o.allow_initialized)
    throw joule::UsageError(
        o.model_dir + " lacks " + loaded.initialized + ": its labels would come from random weights",
        "fine-tune the classifier first, or pass --allow-untrained-head to run it anyway");
  const BertConfig& config = model.config();
  const data::Vocab vocab = [&] {
    try {
      return data::Vocab::load(o.model_dir + "/vocab.txt");
    } catch (const data::VocabError& e) {
      throw data::VocabError(e.what(),
                             "a classifier directory's vocab.txt is its tokenizer's vocabulary (one token a "
                             "line, [PAD] [UNK] [CLS] [SEP] [MASK] among them): put the one the model was "
                             "trained with there");
    }
  }();
  if (vocab.size() > config.vocab_size)
    throw joule::UsageError(o.model_dir + "/vocab.txt has " + std::to_string(vocab.size()) +
                                " tokens, more than the model's vocab_size " + std::to_string(config.vocab_size),
                            "use the vocabulary the model was trained with");
  const data::FullTokenizer tokenizer(vocab, o.lower_case ? *o.lower_case : lower_case_of(o.model_dir, true));
  const int64_t limit = std::min<int64_t>(config.max_position_embeddings, 512);
  if (o.max_length > limit)
    throw joule::UsageError("--max-length " + std::to_string(o.max_length) + " is longer than the model's " +
                            std::to_string(limit));
  const Context c{a, tokenizer, vocab, o.max_length > 0 ? o.max_length : limit, config.type_vocab_size};
  // The output's temporary file now: a directory that cannot hold it fails before any work.
  joule::AtomicFile out(o.output);
  launch::set_threads(o.threads > 0 ? o.threads : launch::physical_cores());
  s.precision_reason = use_precision(model, o.precision).choice.reason;

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
      examples.push_back(read_line(text, line, c));
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
    const EncoderInput input = batch_input(batch, a.model_type == "layoutlm", vocab.pad_id());
    const auto t0 = Clock::now();
    const torch::Tensor probs = torch::softmax(model.forward(input, models::Outputs::kLogits).logits, -1);
    s.seconds += std::chrono::duration<double>(Clock::now() - t0).count();
    ++s.batches;
    for (size_t r = 0; r < batch.size(); ++r) {
      const Example& e = *batch[r];
      results[order[begin + r]] = result(e, probs[static_cast<int64_t>(r)], a, config, vocab);
      s.tokens += static_cast<int64_t>(e.ids.size());
      s.truncated += e.truncated ? 1 : 0;
    }
    s.padded_tokens += input.input_ids.numel();
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
