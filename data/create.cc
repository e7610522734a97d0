#include "data/create.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "data/data_error.h"
#include "data/shard.h"
#include "launch/file_io.h"
#include "launch/parallel.h"

namespace joule::data {

uint64_t Rng::next_u64() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double Rng::uniform() { return static_cast<double>(next_u64() >> 11) * 0x1.0p-53; }

int64_t Rng::randint(int64_t low, int64_t high) {
  const uint64_t range = static_cast<uint64_t>(high - low) + 1;
  if (range == 0) return static_cast<int64_t>(next_u64());
  const uint64_t limit = UINT64_MAX - UINT64_MAX % range;
  uint64_t x;
  do x = next_u64();
  while (x >= limit);
  return low + static_cast<int64_t>(x % range);
}

uint64_t mix_seed(uint64_t a, uint64_t b, uint64_t c) {
  Rng r(a * 0x100000001b3ull ^ (b + 0x51ed27)), s(r.next_u64() ^ (c * 0x9e3779b97f4a7c15ull));
  return s.next_u64();
}

namespace {

void truncate_pair(std::vector<int32_t>& a, std::vector<int32_t>& b, size_t max_tokens, Rng& rng) {
  while (a.size() + b.size() > max_tokens) {
    std::vector<int32_t>& t = a.size() > b.size() ? a : b;
    if (rng.uniform() < 0.5) t.erase(t.begin());
    else t.pop_back();
  }
}

// Reads the inputs: a blank line ends a document; every other line is one sentence.
std::vector<std::vector<std::string>> read_documents(const std::vector<std::string>& inputs) {
  std::vector<std::vector<std::string>> docs(1);
  for (const std::string& path : inputs) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw joule::IoError(path + ": cannot open input text");
    std::string line;
    while (std::getline(in, line)) {
      size_t b = line.find_first_not_of(" \t\r\n\v\f"), e = line.find_last_not_of(" \t\r\n\v\f");
      if (b == std::string::npos) {
        if (!docs.back().empty()) docs.emplace_back();
        continue;
      }
      docs.back().push_back(line.substr(b, e - b + 1));
    }
    if (!docs.back().empty()) docs.emplace_back();  // a new file starts a new document
  }
  return docs;
}

HostBatch to_host(const std::vector<Instance>& instances, size_t begin, size_t end, int seq_len, int max_predictions) {
  HostBatch b;
  b.resize(static_cast<int64_t>(end - begin), seq_len, max_predictions);
  for (size_t i = begin; i < end; ++i) {
    const Instance& inst = instances[i];
    const size_t r = i - begin;
    std::copy(inst.tokens.begin(), inst.tokens.end(), b.input_ids.begin() + r * seq_len);
    std::fill_n(b.input_mask.begin() + r * seq_len, inst.tokens.size(), 1);
    std::copy(inst.segment_ids.begin(), inst.segment_ids.end(), b.segment_ids.begin() + r * seq_len);
    std::copy(inst.masked_positions.begin(), inst.masked_positions.end(), b.masked_positions.begin() + r * max_predictions);
    std::copy(inst.masked_ids.begin(), inst.masked_ids.end(), b.masked_ids.begin() + r * max_predictions);
    b.next_sentence_labels[r] = inst.is_random_next ? 1 : 0;
  }
  return b;
}

}  // namespace

void mask_instance(Instance& inst, const CreateOptions& o, const Vocab& vocab, const std::vector<bool>& is_continuation,
                   Rng& rng) {
  std::vector<std::vector<int32_t>> candidates;
  for (size_t i = 0; i < inst.tokens.size(); ++i) {
    const int32_t t = inst.tokens[i];
    if (t == vocab.cls_id() || t == vocab.sep_id()) continue;
    if (o.whole_word_mask && !candidates.empty() && is_continuation[static_cast<size_t>(t)])
      candidates.back().push_back(static_cast<int32_t>(i));
    else
      candidates.push_back({static_cast<int32_t>(i)});
  }
  rng.shuffle(candidates);
  const int64_t to_predict = std::min<int64_t>(
      o.max_predictions, std::max<int64_t>(1, std::llround(static_cast<double>(inst.tokens.size()) * o.masked_lm_prob)));
  const std::vector<int32_t> original = inst.tokens;
  std::vector<std::pair<int32_t, int32_t>> masked;  // (position, original id)
  std::set<int32_t> covered;
  for (const auto& group : candidates) {
    if (static_cast<int64_t>(masked.size()) >= to_predict) break;
    if (static_cast<int64_t>(masked.size() + group.size()) > to_predict) continue;
    if (std::any_of(group.begin(), group.end(), [&](int32_t i) { return covered.count(i); })) continue;
    for (int32_t index : group) {
      covered.insert(index);
      int32_t replacement;
      if (rng.uniform() < 0.8) replacement = vocab.mask_id();
      else if (rng.uniform() < 0.5) replacement = original[static_cast<size_t>(index)];
      else replacement = static_cast<int32_t>(rng.randint(0, vocab.size() - 1));
      inst.tokens[static_cast<size_t>(index)] = replacement;
      masked.emplace_back(index, original[static_cast<size_t>(index)]);
    }
  }
  // Whole-word masking can find every word longer than the budget: mask one piece rather than leave a row with no
  // prediction (its masked-LM loss would be undefined, and shard validation refuses such rows).
  if (masked.empty() && !candidates.empty()) {
    const int32_t index = candidates.front().front();
    masked.emplace_back(index, original[static_cast<size_t>(index)]);
    inst.tokens[static_cast<size_t>(index)] = vocab.mask_id();
  }
  std::sort(masked.begin(), masked.end());
  inst.masked_positions.clear();
  inst.masked_ids.clear();
  for (const auto& [pos, id] : masked) {
    inst.masked_positions.push_back(pos);
    inst.masked_ids.push_back(id);
  }
}

std::vector<Instance> instances_from_document(const std::vector<Document>& documents, size_t index,
                                              const CreateOptions& o, const Vocab& vocab,
                                              const std::vector<bool>& is_continuation, Rng& rng) {
  const Document& document = documents[index];
  const int64_t max_tokens = o.seq_len - 3;
  int64_t target = max_tokens;
  if (rng.uniform() < o.short_seq_prob) target = rng.randint(2, max_tokens);

  std::vector<Instance> out;
  std::vector<const std::vector<int32_t>*> chunk;
  int64_t chunk_length = 0;
  for (int64_t i = 0; i < static_cast<int64_t>(document.size()); ++i) {
    chunk.push_back(&document[static_cast<size_t>(i)]);
    chunk_length += static_cast<int64_t>(document[static_cast<size_t>(i)].size());
    if (i != static_cast<int64_t>(document.size()) - 1 && chunk_length < target) continue;
    if (!chunk.empty()) {
      const int64_t a_end = chunk.size() >= 2 ? rng.randint(1, static_cast<int64_t>(chunk.size()) - 1) : 1;
      std::vector<int32_t> a, b;
      for (int64_t j = 0; j < a_end; ++j) a.insert(a.end(), chunk[static_cast<size_t>(j)]->begin(), chunk[static_cast<size_t>(j)]->end());
      bool random_next = false;
      if (chunk.size() == 1 || rng.uniform() < 0.5) {
        random_next = true;
        const int64_t target_b = target - static_cast<int64_t>(a.size());
        size_t other = index;
        for (int attempt = 0; attempt < 10 && other == index; ++attempt)
          other = static_cast<size_t>(rng.randint(0, static_cast<int64_t>(documents.size()) - 1));
        const Document& random_doc = documents[other];
        for (int64_t j = rng.randint(0, static_cast<int64_t>(random_doc.size()) - 1); j < static_cast<int64_t>(random_doc.size()); ++j) {
          b.insert(b.end(), random_doc[static_cast<size_t>(j)].begin(), random_doc[static_cast<size_t>(j)].end());
          if (static_cast<int64_t>(b.size()) >= target_b) break;
        }
        i -= static_cast<int64_t>(chunk.size()) - a_end;  // the unused segments are used again
      } else {
        for (size_t j = static_cast<size_t>(a_end); j < chunk.size(); ++j) b.insert(b.end(), chunk[j]->begin(), chunk[j]->end());
      }
      truncate_pair(a, b, static_cast<size_t>(max_tokens), rng);
      if (!a.empty() && !b.empty()) {
        Instance inst;
        inst.tokens.push_back(vocab.cls_id());
        inst.tokens.insert(inst.tokens.end(), a.begin(), a.end());
        inst.tokens.push_back(vocab.sep_id());
        inst.segment_ids.assign(inst.tokens.size(), 0);
        inst.tokens.insert(inst.tokens.end(), b.begin(), b.end());
        inst.tokens.push_back(vocab.sep_id());
        inst.segment_ids.resize(inst.tokens.size(), 1);
        inst.is_random_next = random_next;
        mask_instance(inst, o, vocab, is_continuation, rng);
        out.push_back(std::move(inst));
      }
    }
    chunk.clear();
    chunk_length = 0;
  }
  return out;
}

namespace {

// A non-empty output directory holds another data set: refused unless asked to replace it.
void check_output_directory(const CreateOptions& o) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (!fs::exists(o.out, ec)) return;
  if (!fs::is_directory(o.out, ec)) throw joule::UsageError("data create: --out " + o.out + " exists and is not a directory");
  std::string entries;
  int count = 0;
  for (const auto& e : fs::directory_iterator(o.out, ec)) {
    if (count++ < 4) entries += (entries.empty() ? "" : ", ") + e.path().filename().string();
  }
  if (count == 0 || o.replace) return;
  throw joule::UsageError("data create: --out " + o.out + " is not empty (" + std::to_string(count) + " entries: " + entries +
                              (count > 4 ? ", ..." : "") + "); writing into it would mix two data sets",
                          "choose a new or empty directory, or pass --replace to replace it (the new data set is written beside it "
                          "and swapped in when complete)");
}

// OUT.partial-PID -> OUT, the old OUT (if any) moved aside first and removed after the swap.
void swap_into_place(const std::string& staging, const std::string& out) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string old = out + ".old-" + std::to_string(::getpid());
  const bool had_old = fs::exists(out, ec);
  if (had_old) fs::rename(out, old, ec);
  if (ec) throw_write_error(out, "moving the old data set aside to " + old, ec.value());
  fs::rename(staging, out, ec);
  if (ec) throw_write_error(out, "renaming " + staging + " to it", ec.value());
  if (had_old) fs::remove_all(old, ec);
}

}  // namespace

CreateSummary create_pretraining_data(const CreateOptions& o) {
  check_output_directory(o);
  if (o.seq_len < 8 || o.max_predictions < 1 || o.dupe_factor < 1 || o.shards < 1)
    throw joule::UsageError("data create: --seq-len must be >= 8, --max-pred, --dupe-factor and --shards >= 1");
  if (o.inputs.empty()) throw joule::UsageError("data create: no --input text files");
  const Vocab vocab = Vocab::load(o.vocab);
  const FullTokenizer tokenizer(vocab, o.lower_case);
  std::vector<bool> is_continuation(static_cast<size_t>(vocab.size()));
  for (int64_t i = 0; i < vocab.size(); ++i) is_continuation[static_cast<size_t>(i)] = vocab.token(static_cast<int32_t>(i)).rfind("##", 0) == 0;
  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

  // Tokenize every sentence (in parallel: each line is independent).
  std::vector<std::vector<std::string>> text = read_documents(o.inputs);
  std::vector<Document> documents(text.size());
  launch::parallel_for(text.size(), threads, [&](size_t d, int) {
    for (const std::string& line : text[d]) {
      std::vector<int32_t> ids = tokenizer.to_ids(tokenizer.tokenize(line));
      if (!ids.empty()) documents[d].push_back(std::move(ids));
    }
  });
  documents.erase(std::remove_if(documents.begin(), documents.end(), [](const Document& d) { return d.empty(); }), documents.end());
  if (documents.size() < 2) throw CorpusError("data create: the input holds " + std::to_string(documents.size()) + " document(s); NSP needs at least 2 (separate documents with a blank line)");
  Rng master(o.seed);
  master.shuffle(documents);

  CreateSummary summary;
  if (o.eval_documents < 0 || o.eval_documents > static_cast<int64_t>(documents.size()) - 2)
    throw joule::UsageError("data create: --eval-documents " + std::to_string(o.eval_documents) + " leaves fewer than 2 training documents");
  std::vector<Document> eval_docs(documents.end() - o.eval_documents, documents.end());
  documents.resize(documents.size() - static_cast<size_t>(o.eval_documents));
  summary.documents = static_cast<int64_t>(documents.size());
  summary.eval_documents = o.eval_documents;

  // Each (dupe, document) pair draws from its own stream, so threads cannot change the result.
  auto make_instances = [&](const std::vector<Document>& docs, int dupe_factor, uint64_t stream) {
    std::vector<std::vector<Instance>> per(static_cast<size_t>(dupe_factor) * docs.size());
    launch::parallel_for(per.size(), threads, [&](size_t k, int) {
      Rng rng(mix_seed(o.seed, stream + k / docs.size(), k % docs.size()));
      per[k] = instances_from_document(docs, k % docs.size(), o, vocab, is_continuation, rng);
    });
    std::vector<Instance> all;
    for (auto& v : per) std::move(v.begin(), v.end(), std::back_inserter(all));
    master.shuffle(all);
    return all;
  };
  std::vector<Instance> train = make_instances(documents, o.dupe_factor, 0);
  std::vector<Instance> eval = eval_docs.size() >= 2 ? make_instances(eval_docs, 1, 1000003) : std::vector<Instance>{};
  if (o.eval_documents > 0 && eval.empty()) throw CorpusError("data create: the held-out documents produced no eval sequences");
  if (static_cast<int64_t>(train.size()) < o.shards)
    throw CorpusError("data create: " + std::to_string(train.size()) + " training sequences cannot fill " + std::to_string(o.shards) + " shards");

  namespace fs = std::filesystem;
  const std::string staging = o.out + ".partial-" + std::to_string(::getpid());
  {
    std::error_code ec;
    fs::remove_all(staging, ec);
    fs::create_directories(fs::path(staging) / "train", ec);
    if (ec) throw_write_error(staging, "creating the directory", ec.value());
  }
  auto write_split = [&](const std::vector<Instance>& instances, const std::string& split, int shards, std::vector<std::string>& paths) {
    if (instances.empty()) return;
    fs::create_directories(fs::path(staging) / split);
    paths.resize(static_cast<size_t>(shards));
    launch::parallel_for(static_cast<size_t>(shards), threads, [&](size_t s, int) {
      const size_t begin = instances.size() * s / static_cast<size_t>(shards), end = instances.size() * (s + 1) / static_cast<size_t>(shards);
      char name[64];
      std::snprintf(name, sizeof name, "part_%05zu.hdf5", s);
      write_shard((fs::path(staging) / split / name).string(), to_host(instances, begin, end, o.seq_len, o.max_predictions));
      paths[s] = (fs::path(o.out) / split / name).string();  // where it will be
    });
  };
  write_split(train, "train", o.shards, summary.train_shards);
  write_split(eval, "eval", 1, summary.eval_shards);
  summary.train_sequences = static_cast<int64_t>(train.size());
  summary.eval_sequences = static_cast<int64_t>(eval.size());
  for (const Instance& inst : train) {
    summary.masked_predictions += static_cast<int64_t>(inst.masked_positions.size());
    summary.tokens += static_cast<int64_t>(inst.tokens.size());
  }
  vocab.save((fs::path(staging) / "vocab.txt").string());

  nlohmann::json meta = {{"format", "joule-pretraining-data"}, {"format_version", 1},
                         {"vocab_size", vocab.size()},       {"seq_len", o.seq_len},
                         {"max_predictions", o.max_predictions}, {"seed", o.seed},
                         {"dupe_factor", o.dupe_factor},     {"lower_case", o.lower_case},
                         {"whole_word_mask", o.whole_word_mask}, {"masked_lm_prob", o.masked_lm_prob},
                         {"short_seq_prob", o.short_seq_prob}, {"documents", summary.documents},
                         {"eval_documents", summary.eval_documents}, {"train_sequences", summary.train_sequences},
                         {"eval_sequences", summary.eval_sequences}, {"train_shards", o.shards},
                         {"masked_predictions", summary.masked_predictions}};
  write_file_atomic((fs::path(staging) / "metadata.json").string(), meta.dump(2) + "\n");
  swap_into_place(staging, o.out);
  return summary;
}

}  // namespace joule::data
