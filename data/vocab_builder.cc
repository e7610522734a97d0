#include "data/vocab_builder.h"

#include <algorithm>
#include <map>
#include <mutex>
#include <queue>
#include <set>
#include <thread>
#include <unordered_map>

#include "data/data_error.h"
#include "data/text_input.h"
#include "launch/util/parallel.h"

namespace joule::data {
namespace {

// Word counts over the inputs as data create reads them: files, directories, globs and @LIST files, each file once,
// plain or gzip, checked as UTF-8, in chunks of bounded size.
std::unordered_map<std::string, int64_t> count_words(const VocabBuildOptions& o) {
  const int threads = std::max(1, o.threads > 0 ? o.threads : static_cast<int>(std::thread::hardware_concurrency()));
  std::vector<std::unordered_map<std::string, int64_t>> partial(static_cast<size_t>(threads));
  TextLimits limits;
  limits.skip_bad = o.skip_bad_input;
  // Chunks of 16 MB: the counts do not depend on the cut, and a progress line moves on every chunk.
  const std::vector<std::string> files = expand_inputs(o.inputs);
  const int64_t bytes_in_all = o.on_progress ? plain_text_bytes(files) : -1;
  DocumentChunker chunker(files, 16ll << 20, limits);
  TextChunk chunk;
  int64_t bytes_done = 0;
  while (chunker.next(chunk)) {
    joule::parallel_for(chunk.sentences(), threads, [&](size_t i, int worker) {
      for (std::string& w : basic_tokenize(chunk.sentence(i), o.lower_case)) ++partial[static_cast<size_t>(worker)][w];
    });
    if (o.on_progress) o.on_progress(bytes_done += chunk.input_bytes, bytes_in_all);
  }
  std::unordered_map<std::string, int64_t> counts;
  for (auto& p : partial)
    for (auto& [w, n] : p) counts[w] += n;
  return counts;
}

}  // namespace

Vocab build_vocab(const VocabBuildOptions& o) {
  const std::vector<std::string> specials = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"};
  if (o.size <= static_cast<int64_t>(specials.size()))
    throw joule::UsageError("data vocab: --size must exceed the 5 special tokens");
  auto counts = count_words(o);
  if (counts.empty()) throw CorpusError("data vocab: the input holds no words");

  // Symbols: strings with ids; each word a sequence of symbol ids ("c", "##c", ...).
  std::vector<std::string> symbols;
  std::unordered_map<std::string, int> symbol_id;
  auto intern = [&](const std::string& s) {
    auto [it, inserted] = symbol_id.emplace(s, static_cast<int>(symbols.size()));
    if (inserted) symbols.push_back(s);
    return it->second;
  };
  std::vector<std::pair<std::string, int64_t>> sorted_words(counts.begin(), counts.end());
  std::sort(sorted_words.begin(), sorted_words.end());
  std::vector<std::vector<int>> words;
  std::vector<int64_t> freq;
  std::map<std::string, int64_t> char_freq;
  for (const auto& [w, n] : sorted_words) {
    std::vector<int> seq;
    const std::u32string chars = utf8_to_u32(w);
    for (size_t i = 0; i < chars.size(); ++i) {
      const std::string piece = (i ? "##" : "") + u32_to_utf8(chars.substr(i, 1));
      seq.push_back(intern(piece));
      char_freq[piece] += n;
    }
    words.push_back(std::move(seq));
    freq.push_back(n);
  }

  std::vector<std::string> vocab = specials;
  std::set<std::string> in_vocab(specials.begin(), specials.end());
  std::vector<std::pair<std::string, int64_t>> alphabet(char_freq.begin(), char_freq.end());
  std::stable_sort(alphabet.begin(), alphabet.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  for (const auto& [piece, n] : alphabet) {
    if (static_cast<int64_t>(vocab.size()) >= o.size) break;
    if (in_vocab.insert(piece).second) vocab.push_back(piece);
  }

  using Pair = std::pair<int, int>;
  std::map<Pair, int64_t> pair_count;
  std::map<Pair, std::set<size_t>> where;
  std::set<Pair> changed;  // pairs whose count moved during the current merge
  auto add_pairs = [&](size_t w, int64_t sign) {
    const auto& s = words[w];
    for (size_t i = 0; i + 1 < s.size(); ++i) {
      Pair p{s[i], s[i + 1]};
      pair_count[p] += sign * freq[w];
      if (sign > 0) where[p].insert(w);
      changed.insert(p);
    }
  };
  for (size_t w = 0; w < words.size(); ++w) add_pairs(w, +1);
  auto merged_name = [&](const Pair& p) {
    const std::string& b = symbols[static_cast<size_t>(p.second)];
    return symbols[static_cast<size_t>(p.first)] + (b.rfind("##", 0) == 0 ? b.substr(2) : b);
  };
  // Max-heap of (count, smaller name first) with lazy deletion of stale counts.
  struct Entry {
    int64_t count;
    std::string name;
    Pair pair;
    bool operator<(const Entry& o) const { return count != o.count ? count < o.count : name > o.name; }
  };
  std::priority_queue<Entry> heap;
  for (const auto& [p, n] : pair_count) heap.push({n, merged_name(p), p});

  while (static_cast<int64_t>(vocab.size()) < o.size && !heap.empty()) {
    Entry top = heap.top();
    heap.pop();
    auto it = pair_count.find(top.pair);
    if (it == pair_count.end() || it->second != top.count) continue;  // stale
    if (top.count < o.min_frequency) break;
    const int merged = intern(top.name);
    if (in_vocab.insert(top.name).second) vocab.push_back(top.name);
    const std::set<size_t> affected = where[top.pair];
    changed.clear();
    for (size_t w : affected) {
      add_pairs(w, -1);
      std::vector<int>& s = words[w];
      std::vector<int> out;
      for (size_t i = 0; i < s.size(); ++i) {
        if (i + 1 < s.size() && s[i] == top.pair.first && s[i + 1] == top.pair.second) {
          out.push_back(merged);
          ++i;
        } else {
          out.push_back(s[i]);
        }
      }
      s = std::move(out);
      add_pairs(w, +1);
    }
    pair_count.erase(top.pair);
    where.erase(top.pair);
    changed.erase(top.pair);
    for (const Pair& p : changed) {
      auto c = pair_count.find(p);
      if (c != pair_count.end() && c->second > 0) heap.push({c->second, merged_name(p), p});
    }
  }
  return Vocab::from_tokens(std::move(vocab), "data vocab");
}

}  // namespace joule::data
