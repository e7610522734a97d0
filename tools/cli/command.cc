#include "tools/cli/command.h"

#include <iterator>
#include <string_view>

#include "tools/cli/engine_args.h"

namespace joule::cli {

namespace {

using R = ThreadRuntime;
// Constant-initialized (no constructor runs): find_command reads it before any library has initialized.
constexpr Command kCommands[] = {
    {"train", "pretrain BERT (run under mpirun/srun): --config RUN.toml [--set key=value ...]", kEngine,
     door<read_train>, R::training},
    {"eval", "masked-LM and NSP accuracy of a model directory on shards (JSON)", kEngine, door<read_eval>, R::training},
    {"export", "a checkpoint (or a run's newest) as a HuggingFace model directory", kEngine, door<read_export>,
     R::none},
    {"summary", "a run's training-cost summary again (table; rewrites emissions.csv)", summary, nullptr, R::none},
    {"report", "a run's self-contained HTML report with SVG charts", report, nullptr, R::none},
    {"plan",
     "hours, seq/hour, kWh, USD, CO2 on N x trn1/p4d/p5 (cluster performance model); with\n"
     "--inference: instances, USD/kWh/CO2 per million inferences for a rate on inf1/inf2/g4dn/g5/c*",
     plan, nullptr, R::none},
    {"version", "joule's version and the LibTorch, MPI, HDF5 and BLAS in use", kEngine, door<read_version>,
     R::training},
    {"model init", "write a freshly initialized HuggingFace model directory", kEngine, door<read_model_init>,
     R::training},
    {"model info", "parameter counts of a model config or directory", kEngine, door<read_model_info>, R::none},
    {"model forward", "a BERT/LayoutLM model directory's logits for inputs in a safetensors file", kEngine,
     door<read_model_forward>, R::serving},
    {"infer", "classify the lines of a JSONL file with a BERT/LayoutLM classifier directory", kEngine, door<read_infer>,
     R::serving},
    {"serve", "serve a classifier directory over HTTP (Open Inference Protocol v2, dynamic batching, /metrics)",
     kEngine, door<read_serve>, R::service},
    {"bench model", "forward+backward throughput against this CPU's sgemm rate", kEngine, door<read_bench_model>,
     R::training},
    {"bench infer", "inference throughput and p50/p99 latency per batch size, energy and cost per million", kEngine,
     door<read_bench_infer>, R::serving},
    {"bench serve", "the rate joule serve sustains within a p99 bound (Poisson arrivals, rate after rate)", bench_serve,
     nullptr, R::none},
    {"bench comm", "all-reduce busbw table and the bucketed reducer vs one all-reduce (under mpirun)", kEngine,
     door<read_bench_comm>, R::training},
    {"bench data", "sequences/s the loader delivers to one rank under the global shuffle", kEngine,
     door<read_bench_data>, R::training},
    {"bench train", "the whole training step at N ranks: seq/s, roofline fraction, peak RSS (under mpirun)", kEngine,
     door<read_bench_train>, R::training},
    {"data synth", "write the deterministic synthetic demo corpus", data_synth, nullptr, R::none},
    {"data vocab", "build a WordPiece vocabulary from a corpus", data_vocab, nullptr, R::none},
    {"data create", "raw text + vocab.txt -> pretraining shards (NVIDIA HDF5 layout)", data_create, nullptr, R::none},
    {"data pack", "unpacked shards -> packed shards (up to K sequences a row, no padding between)", data_pack, nullptr,
     R::none},
    {"data inspect", "counts, length histogram, masking rate and decoded samples of shards", data_inspect, nullptr,
     R::none},
    {"data tokenize", "WordPiece tokens of each stdin line (to compare tokenizers)", data_tokenize, nullptr, R::none},
    {"data order", "the sequences a run's steps read, in order (JSON), for an outside reference", data_order, nullptr,
     R::none},
};

}  // namespace

const std::vector<Command>& commands() {
  static const std::vector<Command> table(std::begin(kCommands), std::end(kCommands));
  return table;
}

std::string usage() {
  std::string text =
      "joule: data-parallel BERT-Large pretraining that reports speed, energy and cost\n"
      "\n"
      "usage: joule <command> [options]   (joule <command> --help for its options)\n"
      "\n"
      "commands:\n";
  for (const Command& c : commands()) {
    std::string name = c.name;
    name.resize(15, ' ');
    std::string summary = c.summary;
    for (size_t at = 0; (at = summary.find('\n', at)) != std::string::npos; at += 18) summary.insert(at + 1, 17, ' ');
    text += "  " + name + summary + "\n";
  }
  return text;
}

const Command* find_command(int words, char** word) {
  if (words < 1) return nullptr;
  // A two-word command consumes both words; a one-word command's next word is its own (`joule report RUN`).
  const std::string_view first = word[0], second = words > 1 && word[1][0] != '-' ? word[1] : "";
  const Command* one_word = nullptr;
  for (const Command& c : kCommands) {
    const std::string_view name = c.name;
    const size_t space = name.find(' ');
    if (space == std::string_view::npos) {
      if (name == first) one_word = &c;
    } else if (name.substr(0, space) == first && name.substr(space + 1) == second) {
      return &c;
    }
  }
  return one_word;
}

std::string group_commands(const std::string& word) {
  std::string group;
  for (const Command& c : commands())
    if (std::string(c.name).rfind(word + " ", 0) == 0) group += (group.empty() ? "" : ", ") + std::string(c.name);
  return group;
}

}  // namespace joule::cli
