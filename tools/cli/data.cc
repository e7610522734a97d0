// `joule data synth|vocab|create|pack|inspect|tokenize|order`: from text to pretraining shards, and a look inside them.
#include <sys/resource.h>

#include <iostream>
#include <string>
#include <vector>

#include "data/create.h"
#include "data/pack.h"
#include "data/vocab_builder.h"
#include "launch/util/file_io.h"
#include "launch/util/format.h"
#include "launch/util/progress.h"
#include "tools/cli/command.h"
#include "tools/cli/flags.h"
#include "tools/data_commands.h"

namespace joule::cli {
namespace {

void add_create_flags(cxxopts::Options& o) {
  o.add_options()(
      "input",
      "text: files, directories, glob patterns or @LIST files; plain or .gz; one sentence per line, a blank line "
      "between documents (repeatable; the value may hold commas)",
      cxxopts::value<std::string>());
  add_path_flags(
      o, {{"vocab", "vocab.txt", PathKind::input_file, "vocab"}, {"out", "output directory", PathKind::output_dir}});
  o.add_options()("memory-budget", "peak memory to stay under (chunks are sized to it; up to 1 PiB)",
                  cxxopts::value<std::string>()->default_value("2GB"))("lower-case", "lower-case and strip accents",
                                                                       cxxopts::value<bool>()->default_value("true"))(
      "no-lower-case", "keep case and accents")("whole-word-mask", "mask whole words")(
      "skip-bad-input",
      "skip and count invalid UTF-8 lines, over-long lines or documents and empty files instead of stopping")(
      "replace", "replace an --out holding another data set (built in OUT.partial, swapped in when complete)")(
      "pack", "pack each dupe's sequences, up to --max-per-pack a row (packed shards: no padding between them)");
}

const NumberFlag kPhase{"phase", "NVIDIA's phase presets", nullptr, OptionRange{1, 2},
                        "1 = --seq-len 128 --max-pred 20, 2 = --seq-len 512 --max-pred 80"},
    kCreateSeqLen{"seq-len", "tokens per sequence", nullptr, OptionRange{8, 65535}, "default 128"},
    kMaxPred{"max-pred", "masked positions per sequence, at most --seq-len", nullptr, OptionRange{1, 65535},
             "default 20"},
    kDupeFactor{"dupe-factor", "times each document is used with different masks", "5", OptionRange{1, 10000}},
    kShards{"shards", "training shards: the input cut into this many equal parts (plain-text input)", "0",
            OptionRange{0, 1e6}, "0: from --shard-mb or the input's files"},
    kShardMb{"shard-mb", "input MB per training shard (instead of --shards)", "0", OptionRange{0, 1e7}, "0: none"},
    kCreateSeed{"seed", "seed", "12345", kSeeds},
    kMaskedLmProb{"masked-lm-prob", "fraction of tokens masked", "0.15", OptionRange{0, 1, true, false}},
    kShortSeqProb{"short-seq-prob", "probability of a shorter target length", "0.1", OptionRange{0, 1}},
    kEvalDocuments{"eval-documents", "documents of the first chunk held out for an eval shard", "0",
                   OptionRange{0, 1e12}},
    kCreateThreads{"threads", "worker threads; the output does not depend on it", "0", kThreads, "0: all cores"};

const NumberFlag kMaxPerPack{"max-per-pack", "sequences a packed row holds at most", "3", OptionRange{1, 64}};

// The parsed flags of `data create` as the options of data::create_pretraining_data, with their cross-flag rules.
data::CreateOptions create_options(const cxxopts::ParseResult& r, const std::vector<std::string>& inputs) {
  if (inputs.empty()) throw UsageError("missing required option --input");
  data::CreateOptions c;
  c.inputs = inputs;
  c.vocab = required(r, "vocab");
  c.out = output_directory(required(r, "out"));
  if (r.count("phase")) {
    const int64_t phase = int_flag(r, kPhase);
    if (r.count("seq-len") || r.count("max-pred"))
      throw UsageError("--phase sets --seq-len and --max-pred: give one or the other");
    c.seq_len = phase == 1 ? 128 : 512;
    c.max_predictions = phase == 1 ? 20 : 80;
  }
  if (r.count("seq-len")) c.seq_len = static_cast<int>(int_flag(r, kCreateSeqLen));
  if (r.count("max-pred")) c.max_predictions = static_cast<int>(int_flag(r, kMaxPred));
  if (c.max_predictions > c.seq_len)
    throw UsageError("--max-pred " + std::to_string(c.max_predictions) + " is more than --seq-len " +
                     std::to_string(c.seq_len) + ": a sequence cannot hold more masked positions than tokens");
  c.dupe_factor = static_cast<int>(int_flag(r, kDupeFactor));
  c.shards = static_cast<int>(int_flag(r, kShards));
  c.shard_mb = number_flag(r, kShardMb);
  if (c.shards > 0 && c.shard_mb > 0) throw UsageError("give --shards or --shard-mb, not both");
  c.memory_budget = parse_size("memory-budget", r["memory-budget"].as<std::string>());
  c.seed = static_cast<uint64_t>(int_flag(r, kCreateSeed));
  c.lower_case = r["lower-case"].as<bool>() && !r.count("no-lower-case");
  c.whole_word_mask = r.count("whole-word-mask") > 0;
  c.masked_lm_prob = number_flag(r, kMaskedLmProb);
  c.short_seq_prob = number_flag(r, kShortSeqProb);
  c.eval_documents = int_flag(r, kEvalDocuments);
  c.threads = thread_flag(r, kCreateThreads);
  c.replace = r.count("replace") > 0;
  c.skip_bad_input = r.count("skip-bad-input") > 0;
  if (r.count("max-per-pack") && !r.count("pack")) throw UsageError("--max-per-pack applies with --pack");
  c.pack = r.count("pack") ? static_cast<int>(int_flag(r, kMaxPerPack)) : 0;
  return c;
}

// What `data create` did: notes, what it kept or skipped, and the counts, chunks and peak memory.
void print_create_result(const data::CreateOptions& c, const data::CreateSummary& s) {
  for (const std::string& note : s.notes) std::cout << "note: " << note << "\n";
  if (s.already_complete)
    std::cout << c.out << " already holds this data set (same inputs and arguments): nothing to do\n";
  if (s.resumed_chunks > 0)
    std::cout << "resumed: kept " << s.resumed_chunks << " verified shard(s) from an earlier run\n";
  if (s.skipped > 0)
    std::cout << "skipped " << s.skipped << " bad input item(s) (--skip-bad-input), the first: " << s.first_skip
              << "\n";
  const auto count = [](int64_t n) { return grouped(static_cast<double>(n)); };
  std::cout << (s.already_complete ? "" : "wrote ") << c.out << ": " << count(s.train_sequences)
            << " training sequences";
  if (c.pack > 0)
    std::cout << " packed into " << count(s.train_rows) << " rows (up to " << c.pack << " a row, "
              << static_cast<double>(s.train_sequences) / static_cast<double>(std::max<int64_t>(1, s.train_rows))
              << " on average)";
  std::cout << " in " << s.train_shards.size() << " shard(s) from " << count(s.documents) << " documents";
  if (s.eval_sequences)
    std::cout << ", " << count(s.eval_sequences) << " eval sequences from " << count(s.eval_documents)
              << " held-out documents";
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const std::string chunk = s.chunk_bytes >= (1 << 20) ? std::to_string((s.chunk_bytes + (1 << 19)) >> 20) + " MB"
                                                       : std::to_string((s.chunk_bytes + 512) >> 10) + " KB";
  std::cout << "; " << count(s.masked_predictions) << " masked predictions; " << s.chunks << " chunk(s) of up to "
            << chunk << " of text; peak memory " << usage.ru_maxrss / 1024 << " MB (budget "
            << c.memory_budget / (1 << 20) << " MB)\n";
}

}  // namespace

int data_synth(int argc, char** argv) {
  cxxopts::Options o("joule data synth", "write the deterministic synthetic demo corpus");
  add_path_flags(o, {{"out", "output text file", PathKind::output_file}});
  const NumberFlag documents{"documents", "number of documents", "2000", OptionRange{2, 1e9}},
      seed{"seed", "seed", "1", kSeeds};
  add_number_flags(o, {documents, seed});
  auto r = parse(o, argc, argv);
  data::SynthOptions s;
  s.documents = int_flag(r, documents);
  s.seed = static_cast<uint64_t>(int_flag(r, seed));
  const int64_t n = data::write_synthetic_corpus(required(r, "out"), s);
  std::cout << "wrote " << r["out"].as<std::string>() << ": " << s.documents << " documents, " << n << " sentences\n";
  return 0;
}

int data_vocab(int argc, char** argv) {
  const std::vector<std::string> inputs = take_flag_values(argc, argv, "input");  // a path may hold a comma
  cxxopts::Options o("joule data vocab", "build a WordPiece vocabulary from a corpus");
  o.add_options()("input", "text file (repeatable; the value may hold commas)", cxxopts::value<std::string>());
  add_path_flags(o, {{"out", "vocab.txt to write", PathKind::output_file}});
  o.add_options()("lower-case", "lower-case and strip accents", cxxopts::value<bool>()->default_value("true"))(
      "no-lower-case", "keep case and accents")(
      "skip-bad-input", "skip and count invalid UTF-8 lines, over-long lines or documents and empty files");
  add_quiet_flag(o);
  const NumberFlag size{"size", "vocabulary size, special tokens included", "8000", OptionRange{6, 1 << 24}},
      min_frequency{"min-frequency", "least count of a merged piece", "2", OptionRange{1, 1e15}};
  add_number_flags(o, {size, min_frequency});
  auto r = parse(o, argc, argv, inputs);
  if (inputs.empty()) throw UsageError("missing required option --input");
  data::VocabBuildOptions v;
  v.inputs = inputs;
  v.size = int_flag(r, size);
  v.min_frequency = int_flag(r, min_frequency);
  v.lower_case = r["lower-case"].as<bool>() && !r.count("no-lower-case");
  v.skip_bad_input = r.count("skip-bad-input") > 0;
  const std::string out = required(r, "out");
  Progress progress("data vocab", Progress::Unit::bytes, 0, r.count("quiet") > 0);
  v.on_progress = [&](int64_t bytes, int64_t of) { progress.set(bytes, of); };
  const auto vocab = data::build_vocab(v);
  progress.finish();
  vocab.save(out);
  std::cout << "wrote " << out << ": " << vocab.size() << " tokens\n";
  return 0;
}

int data_create(int argc, char** argv) {
  const std::vector<std::string> inputs = take_flag_values(argc, argv, "input");  // a path may hold a comma
  cxxopts::Options o("joule data create", "raw text + vocab.txt -> pretraining shards, streamed in bounded memory");
  add_create_flags(o);
  add_number_flags(o, {kPhase, kCreateSeqLen, kMaxPred, kDupeFactor, kShards, kShardMb, kCreateSeed, kMaskedLmProb,
                       kShortSeqProb, kEvalDocuments, kCreateThreads, kMaxPerPack});
  add_quiet_flag(o);
  auto r = parse(o, argc, argv, inputs);
  data::CreateOptions c = create_options(r, inputs);
  // The input bytes done of all of them (gzip input: of an unknown total, so no share and no time left).
  Progress progress("data create", Progress::Unit::bytes, 0, r.count("quiet") > 0);
  c.on_progress = [&](int64_t bytes, int64_t of) { progress.set(bytes, of); };
  const data::CreateSummary summary = data::create_pretraining_data(c);
  progress.finish();
  print_create_result(c, summary);
  return 0;
}

int data_pack(int argc, char** argv) {
  cxxopts::Options o("joule data pack",
                     "unpacked shards -> packed shards (several sequences a row, no padding between)");
  add_path_flags(o, {{"in",
                      "the shards to pack: a `joule data create` directory (its train/ and eval/), a shard directory, "
                      "glob, list file or shard (also the first positional)",
                      PathKind::input_path},
                     {"out", "output directory (also the second positional)", PathKind::output_dir}});
  const NumberFlag seed{"seed", "seed of the packed rows' order", "12345", kSeeds},
      threads{"threads", "compression threads; the output does not depend on it", "0", kThreads, "0: all cores"},
      row{"seq-len", "NVIDIA's packed shards as IN: tokens a row (their packs' length)", "512", OptionRange{8, 65535}},
      slots{"max-pred", "NVIDIA's packed shards as IN: prediction slots a row", "80", OptionRange{1, 65535}};
  add_number_flags(o, {kMaxPerPack, seed, threads, row, slots});
  o.add_options()("replace", "replace an --out holding another data set (built in OUT.partial, swapped in when done)");
  add_quiet_flag(o);
  o.parse_positional({"in", "out"});
  o.positional_help("IN OUT").show_positional_help();
  auto r = parse(o, argc, argv);
  data::PackOptions p;
  p.in = required(r, "in");
  p.out = output_directory(required(r, "out"));
  p.max_per_pack = static_cast<int>(int_flag(r, kMaxPerPack));
  p.seq_len = int_flag(r, row);
  p.max_predictions = int_flag(r, slots);
  p.seed = static_cast<uint64_t>(int_flag(r, seed));
  p.threads = thread_flag(r, threads);
  p.replace = r.count("replace") > 0;
  Progress progress("data pack", Progress::Unit::shards, 0, r.count("quiet") > 0);
  p.on_progress = [&](int64_t done, int64_t of) { progress.set(done, of); };
  const data::PackSummary summary = data::pack_data_set(p);
  progress.finish();
  std::cout << tools::describe_pack(p, summary);
  return 0;
}

int data_inspect(int argc, char** argv) {
  cxxopts::Options o("joule data inspect", "counts, length histogram, masking rate and decoded samples");
  add_path_flags(o, {{"data", "shard directory, glob, list file or shard (also positional)", PathKind::input_path},
                     {"vocab", "vocab.txt (default: beside the data)", PathKind::input_file, "vocab", "", ""}});
  const NumberFlag samples{"samples", "sequences to decode", "3", OptionRange{0, 1e6}};
  add_number_flags(o, {samples});
  o.parse_positional({"data"});
  o.positional_help("[DATA]").show_positional_help();
  auto r = parse(o, argc, argv);
  std::cout << tools::data_inspect(required(r, "data"), static_cast<int>(int_flag(r, samples)),
                                   r["vocab"].as<std::string>());
  return 0;
}

int data_order(int argc, char** argv) {
  cxxopts::Options o("joule data order",
                     "the sequences a run's steps read, in order (JSON), for an outside implementation to train on");
  add_path_flags(o, {{"data", "the run's data.train: shard directory, glob, list file or shard", PathKind::input_path},
                     {"out", "JSON written atomically", PathKind::output_file}});
  const NumberFlag global{"global-batch", "the run's sequences a step (train.global_batch)", nullptr,
                          OptionRange{1, 1LL << 40}},
      steps{"steps", "optimizer steps", nullptr, OptionRange{1, 1e7}},
      seed{"seed", "the run's train.seed", "42", kSeeds};
  add_number_flags(o, {global, steps, seed});
  auto r = parse(o, argc, argv);
  tools::DataOrderOptions d;
  d.data = required(r, "data");
  d.global_batch = int_flag(r, global);
  d.steps = int_flag(r, steps);
  d.seed = static_cast<uint64_t>(int_flag(r, seed));
  const std::string out = required(r, "out");
  write_file_atomically(out, tools::data_order(d));
  std::cout << "wrote the order of " << d.steps << " steps of " << d.global_batch << " sequences to " << out << "\n";
  return 0;
}

int data_tokenize(int argc, char** argv) {
  cxxopts::Options o("joule data tokenize", "WordPiece tokens of each stdin line");
  add_path_flags(o, {{"vocab", "vocab.txt", PathKind::input_file, "vocab"}});
  o.add_options()("lower-case", "lower-case and strip accents (default)")("no-lower-case", "keep case and accents")(
      "speed", "print the tokenizer's throughput on stdin (one thread, text in memory) instead of the tokens");
  auto r = parse(o, argc, argv);
  if (r.count("lower-case") && r.count("no-lower-case"))
    throw UsageError("give --lower-case or --no-lower-case, not both");
  if (r.count("speed"))
    std::cout << tools::tokenizer_speed(std::cin, required(r, "vocab"), !r.count("no-lower-case"));
  else
    tools::data_tokenize(std::cin, std::cout, required(r, "vocab"), !r.count("no-lower-case"));
  return 0;
}

}  // namespace joule::cli
