#include "models/infer/classifier.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <optional>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "data/tokenizer.h"
#include "launch/runtime.h"
#include "launch/util/file_io.h"
#include "launch/util/json_field.h"
#include "launch/util/utf8.h"
#include "models/encoder_model.h"
#include "models/infer/infer.h"

namespace joule::models::infer {
namespace {

using nlohmann::json;
using Box = std::array<int64_t, 4>;

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

json parse_line(const std::string& text) {
  if (const std::string problem = joule::utf8_problem(text); !problem.empty())
    bad(problem.substr(problem.find("byte ")));  // "byte B (0xXX): not valid UTF-8": the file:line is said before it
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    bad("not JSON: " + joule::json_error_words(e));
  }
}

Example read_object(const json& j, const Context& c) {
  if (!j.is_object()) bad("expected a JSON object, found " + j.dump().substr(0, 80));
  const bool layout = c.architecture.model_type == "layoutlm";
  if (layout && !j.contains("words")) bad("no \"words\" (a LayoutLM line: {\"words\": [...], \"boxes\": [...]})");
  Example e = layout ? read_layout(j, c) : read_text(j, c);
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

data::Vocab load_vocab(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(dir + "/vocab.txt", ec))
    throw joule::IoError(dir + " has no vocab.txt",
                         "a classifier directory holds config.json, model.safetensors and the vocab.txt of its "
                         "tokenizer");
  try {
    return data::Vocab::load(dir + "/vocab.txt");
  } catch (const data::VocabError& e) {
    throw data::VocabError(e.what(),
                           "a classifier directory's vocab.txt is its tokenizer's vocabulary (one token a line, "
                           "[PAD] [UNK] [CLS] [SEP] [MASK] among them): put the one the model was trained with there");
  }
}

// The model of `o.model_dir`, refused unless it is a classifier with a trained head (or allowed an untrained one).
LoadedEncoderModel load_classifier(const ClassifierOptions& o) {
  LoadedEncoderModel loaded = load_encoder_model(o.model_dir, o.architecture);
  const Architecture& a = loaded.model.architecture();
  if (a.head == Head::kNone)
    throw joule::UsageError(a.name +
                                " has no classification head: joule runs ...ForSequenceClassification and "
                                "...ForTokenClassification models",
                            "give --architecture a classifier, or a fine-tuned classifier's directory");
  if (!loaded.initialized.empty() && !o.allow_initialized)
    throw joule::UsageError(
        o.model_dir + " lacks " + loaded.initialized + ": its labels would come from random weights",
        "fine-tune the classifier first, or pass --allow-untrained-head to run it anyway");
  return loaded;
}

}  // namespace

struct Classifier::Impl {
  Impl(LoadedEncoderModel model, data::Vocab vocabulary, bool lower_case, int64_t max_length)
      : loaded(std::move(model)),
        vocab(std::move(vocabulary)),
        tokenizer(vocab, lower_case),
        context{loaded.model.architecture(), tokenizer, vocab, max_length, loaded.model.config().type_vocab_size} {}
  LoadedEncoderModel loaded;
  data::Vocab vocab;
  data::FullTokenizer tokenizer;
  Context context;
  std::string loading_notes, precision_reason, precision;
  int threads = 0;
};

Classifier::Classifier(const ClassifierOptions& o) {
  if (o.max_length != 0 && o.max_length < 3)
    throw joule::UsageError("--max-length " + std::to_string(o.max_length) +
                            " leaves no room for text ([CLS] and one or two [SEP] take 3)");
  data::Vocab vocab = load_vocab(o.model_dir);
  LoadedEncoderModel loaded = load_classifier(o);
  const BertConfig& config = loaded.model.config();
  if (vocab.size() > config.vocab_size)
    throw joule::UsageError(o.model_dir + "/vocab.txt has " + std::to_string(vocab.size()) +
                                " tokens, more than the model's vocab_size " + std::to_string(config.vocab_size),
                            "use the vocabulary the model was trained with");
  const int64_t limit = std::min<int64_t>(config.max_position_embeddings, 512);
  if (o.max_length > limit)
    throw joule::UsageError("--max-length " + std::to_string(o.max_length) + " is longer than the model's " +
                            std::to_string(limit));
  const bool lower = o.lower_case ? *o.lower_case : lower_case_of(o.model_dir, true);
  std::string notes;
  for (const std::string& n : loaded.loading_notes) notes += "note: " + n + "\n";
  impl_ = std::make_unique<Impl>(std::move(loaded), std::move(vocab), lower, o.max_length > 0 ? o.max_length : limit);
  impl_->loading_notes = notes;
  impl_->threads = o.threads > 0 ? o.threads : launch::physical_cores();
  launch::set_threads(impl_->threads);
  const PrecisionChoice choice = use_precision(impl_->loaded.model, o.precision).choice;
  impl_->precision_reason = choice.reason;
  impl_->precision = precision_name(choice.precision);
}

Classifier::~Classifier() = default;

Example Classifier::read(const json& object) const { return read_object(object, impl_->context); }

Example Classifier::read_line(const std::string& text) const { return read_object(parse_line(text), impl_->context); }

Classifier::Results Classifier::classify(const std::vector<const Example*>& batch) {
  using Clock = std::chrono::steady_clock;
  EncoderModel& model = impl_->loaded.model;
  const EncoderInput input = batch_input(batch, layout(), impl_->vocab.pad_id());
  Results r;
  const auto t0 = Clock::now();
  const torch::Tensor probs = torch::softmax(model.forward(input, models::Outputs::kLogits).logits, -1);
  r.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  for (size_t k = 0; k < batch.size(); ++k) {
    r.objects.push_back(
        result(*batch[k], probs[static_cast<int64_t>(k)], model.architecture(), model.config(), impl_->vocab));
    r.tokens += static_cast<int64_t>(batch[k]->ids.size());
  }
  r.padded_tokens = input.input_ids.numel();
  return r;
}

bool Classifier::layout() const { return impl_->context.architecture.model_type == "layoutlm"; }
bool Classifier::token_head() const { return impl_->context.architecture.head == Head::kToken; }
const std::string& Classifier::architecture() const { return impl_->context.architecture.name; }
int64_t Classifier::max_length() const { return impl_->context.max_length; }
const std::string& Classifier::loading_notes() const { return impl_->loading_notes; }
const std::string& Classifier::precision_reason() const { return impl_->precision_reason; }

const std::string& Classifier::precision() const { return impl_->precision; }

int Classifier::threads() const { return impl_->threads; }

}  // namespace joule::models::infer
