#include "tools/data_commands.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <sstream>
#include <string_view>
#include <vector>

#include "data/dataset.h"
#include "data/row_reader.h"
#include "data/tokenizer.h"

#include <nlohmann/json.hpp>

namespace joule::tools {

std::string describe_pack(const data::PackOptions& o, const data::PackSummary& s) {
  std::ostringstream out;
  char line[512];
  if (s.already_complete) out << o.out << " already holds this packed data set: nothing to do\n";
  for (const std::string& note : s.notes) out << "note: " << note << "\n";
  if (s.resumed_shards > 0) out << "kept " << s.resumed_shards << " shard(s) an earlier run packed\n";
  std::snprintf(line, sizeof line,
                "packed %lld sequences of %lld tokens into %lld rows (from %lld), at most %d a row, %lld shard(s)\n"
                "packing efficiency (real tokens / row tokens): %.1f%% before, %.1f%% after: %.2fx fewer rows\n",
                static_cast<long long>(s.sequences), static_cast<long long>(s.seq_len),
                static_cast<long long>(s.rows_after), static_cast<long long>(s.rows_before), o.max_per_pack,
                static_cast<long long>(s.shards), 100.0 * s.efficiency_before, 100.0 * s.efficiency_after,
                static_cast<double>(s.rows_before) / std::max<int64_t>(1, s.rows_after));
  out << line << "wrote " << o.out << "\n";
  return out.str();
}

std::string data_inspect(const std::string& given, int samples, const std::string& vocab_arg) {
  const std::string spec = data::data_create_split(given, "train");
  const data::Dataset dataset = data::Dataset::open(spec);
  const std::string vocab_path = vocab_arg.empty() ? data::find_vocab_beside(spec) : vocab_arg;
  std::ostringstream out;
  out << "dataset " << spec << ": " << dataset.shards().size() << " shard(s), ";
  if (dataset.pack() > 0)
    out << dataset.size() << " packed rows holding " << dataset.sequences() << " sequences (up to " << dataset.pack()
        << " a row)";
  else
    out << dataset.size() << " sequences";
  out << ", seq_len " << dataset.seq_len() << ", max predictions " << dataset.max_predictions() << "\n";
  int64_t masked = 0, tokens = 0, max_id = -1;
  for (const auto& s : dataset.shards()) {
    masked += s.stats.masked_predictions;
    tokens += s.stats.real_tokens;
    max_id = std::max(max_id, s.stats.max_token_id);
    out << "  " << s.path << ": " << s.stats.sequences << (s.stats.pack > 0 ? " rows" : " sequences")
        << (s.stats.int64_layout ? " (int64 layout)" : "") << "\n";
  }
  char line[256];
  std::snprintf(line, sizeof line, "packing efficiency %.1f%% (real tokens of the rows' tokens; the rest is padding)\n",
                100.0 * dataset.packing_efficiency());
  out << line;
  const double sequences = static_cast<double>(dataset.sequences());
  std::snprintf(line, sizeof line,
                "tokens %lld (%.1f per sequence), masked %lld (%.2f%% of tokens, %.1f per sequence), max id %lld\n",
                static_cast<long long>(tokens), static_cast<double>(tokens) / sequences, static_cast<long long>(masked),
                100.0 * masked / std::max<int64_t>(1, tokens), static_cast<double>(masked) / sequences,
                static_cast<long long>(max_id));
  out << line;

  // Length histogram over real tokens, 8 buckets.
  const int buckets = 8;
  std::vector<int64_t> hist(buckets, 0);
  int64_t random_next = 0;
  for (const auto& s : dataset.shards()) {
    data::ShardReader reader(s.path);
    data::HostBatch b;
    for (int64_t begin = 0; begin < reader.sequences(); begin += 4096) {
      reader.read_range(begin, std::min<int64_t>(4096, reader.sequences() - begin), b);
      for (int64_t r = 0; r < b.rows; ++r) {
        for (int64_t k = 0; k < b.sequences_in(r); ++k) {  // each sequence of a packed row
          int64_t len = 0;
          if (b.pack > 0)
            len = b.sequence_lengths[r * b.pack + k];
          else
            for (int64_t i = 0; i < b.seq_len; ++i) len += b.input_mask[r * b.seq_len + i];
          hist[static_cast<size_t>(std::min<int64_t>(buckets - 1, (len - 1) * buckets / b.seq_len))]++;
          random_next += b.next_sentence_labels[r * b.labels_per_row() + k];
        }
      }
    }
  }
  std::snprintf(line, sizeof line, "next sentence: %.1f%% random\nlength histogram (real tokens a sequence):\n",
                100.0 * random_next / sequences);
  out << line;
  const int64_t peak = *std::max_element(hist.begin(), hist.end());
  for (int i = 0; i < buckets; ++i) {
    std::snprintf(
        line, sizeof line, "  %4lld-%-4lld %10lld  %s\n", static_cast<long long>(i * dataset.seq_len() / buckets + 1),
        static_cast<long long>((i + 1) * dataset.seq_len() / buckets),
        static_cast<long long>(hist[static_cast<size_t>(i)]),
        std::string(static_cast<size_t>(40 * hist[static_cast<size_t>(i)] / std::max<int64_t>(1, peak)), '#').c_str());
    out << line;
  }

  if (samples > 0) {
    if (vocab_path.empty()) {
      out << "(no vocab.txt beside the data; pass --vocab to decode samples)\n";
      return out.str();
    }
    const data::Vocab vocab = data::Vocab::load(vocab_path);
    std::vector<uint64_t> ids;
    for (int i = 0; i < samples && i < dataset.size(); ++i)
      ids.push_back(static_cast<uint64_t>(i * (dataset.size() / samples)));
    const data::HostBatch b = data::read_sequences(dataset, ids);
    for (int64_t r = 0; r < b.rows; ++r) {
      out << "\n"
          << (b.pack > 0 ? "row " : "sequence ") << ids[static_cast<size_t>(r)]
          << (b.pack > 0                  ? " (" + std::to_string(b.sequences_in(r)) + " sequences)"
              : b.next_sentence_labels[r] ? " (random next)"
                                          : " (is next)")
          << ":\n  ";
      for (int64_t i = 0; i < b.seq_len && b.input_mask[r * b.seq_len + i]; ++i) {
        const int32_t id = b.input_ids[r * b.seq_len + i];
        out << (id < vocab.size() ? vocab.token(id) : "<" + std::to_string(id) + ">") << " ";
      }
      out << "\n  masked:";
      for (int64_t k = 0; k < b.max_predictions && b.masked_positions[r * b.max_predictions + k]; ++k) {
        const int32_t id = b.masked_ids[r * b.max_predictions + k];
        out << " " << b.masked_positions[r * b.max_predictions + k] << "="
            << (id < vocab.size() ? vocab.token(id) : "<" + std::to_string(id) + ">");
      }
      out << "\n";
    }
  }
  return out.str();
}

std::string data_order(const DataOrderOptions& o) {
  const data::Dataset dataset = data::Dataset::open(data::data_create_split(o.data, "train"));
  const uint64_t global = static_cast<uint64_t>(o.global_batch);
  const data::DistributedSampler sampler({dataset.block_layout(), global, global, 1, 0, o.seed});
  nlohmann::json shards = nlohmann::json::array(), steps = nlohmann::json::array();
  for (const data::ShardEntry& s : dataset.shards()) shards.push_back({{"path", s.path}, {"rows", s.stats.sequences}});
  data::SamplerState state;
  for (int64_t step = 0; step < o.steps; ++step) steps.push_back(sampler.next_ids(state));
  nlohmann::json j = {{"format", "joule data order 1"},
                      {"order", dataset.block_layout().order_name()},
                      {"seed", o.seed},
                      {"global_batch", global},
                      {"shards", shards},
                      {"steps", steps}};
  return j.dump() + "\n";
}

void data_tokenize(std::istream& in, std::ostream& out, const std::string& vocab_path, bool lower_case) {
  const data::Vocab vocab = data::Vocab::load(vocab_path);
  const data::FullTokenizer tokenizer(vocab, lower_case);
  std::string line;
  std::vector<int32_t> ids;
  while (std::getline(in, line)) {
    ids.clear();
    tokenizer.encode(line, ids);  // the pieces' ids; a piece is its vocabulary token
    for (size_t i = 0; i < ids.size(); ++i) out << (i ? " " : "") << vocab.token(ids[i]);
    out << "\n";
  }
}

std::string tokenizer_speed(std::istream& in, const std::string& vocab_path, bool lower_case) {
  const data::Vocab vocab = data::Vocab::load(vocab_path);
  const data::FullTokenizer tokenizer(vocab, lower_case);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::string_view> lines;
  for (size_t begin = 0; begin < text.size();) {
    const size_t end = std::min(text.find('\n', begin), text.size());
    lines.emplace_back(text.data() + begin, end - begin);
    begin = end + 1;
  }
  // The median of 3 runs of `encode_line` over every line; the tokens of the last run.
  auto time_path = [&](auto encode_line) {
    std::vector<double> seconds;
    size_t tokens = 0;
    for (int run = 0; run < 3; ++run) {
      tokens = 0;
      const auto t0 = std::chrono::steady_clock::now();
      for (std::string_view line : lines) tokens += encode_line(line);
      seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(seconds.begin(), seconds.end());
    return std::make_pair(seconds[1], tokens);
  };
  std::vector<int32_t> ids;
  const auto [fast_s, tokens] = time_path([&](std::string_view line) {
    ids.clear();
    tokenizer.encode(line, ids);
    return ids.size();
  });
  // The reference-shaped path (a string per word and per piece), for comparison.
  const auto [string_s, string_tokens] =
      time_path([&](std::string_view line) { return tokenizer.to_ids(tokenizer.tokenize(line)).size(); });
  const double mb = static_cast<double>(text.size()) / 1e6;
  nlohmann::json j = {{"bytes", text.size()},
                      {"lines", lines.size()},
                      {"tokens", tokens},
                      {"seconds", fast_s},
                      {"mb_per_s", mb / fast_s},
                      {"tokens_per_s", static_cast<double>(tokens) / fast_s},
                      {"string_path_mb_per_s", mb / string_s},
                      {"same_token_count", tokens == string_tokens}};
  return j.dump() + "\n";
}

}  // namespace joule::tools
