// End-to-end: the joule binary as a user runs it.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include "models/bf16_linear.h"
#include "models/safetensors.h"
#include "tools/cli/command.h"
#include "tools/cli/engine.h"

#include "test_util.h"

using joule::test::run_command;
using joule::test::TempDir;

namespace {
const std::string kJoule = JOULE_BINARY;
}

TEST(Cli, HelpListsTheCommands) {
  auto r = run_command(kJoule + " --help");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* c : {"version", "model init", "model info", "bench model"})
    EXPECT_NE(r.output.find(c), std::string::npos) << c;
  auto none = run_command(kJoule);
  EXPECT_EQ(none.exit_code, 2);
  auto unknown = run_command(kJoule + " frobnicate");
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.output.find("unknown command 'frobnicate'"), std::string::npos) << unknown.output;
}

// The command table is the one list: the usage, --list-commands and every command's --help follow it.
TEST(Cli, EveryCommandOfTheTableIsListedAndHasHelp) {
  const std::string usage = run_command(kJoule + " --help").output;
  const std::string listed = run_command(kJoule + " --list-commands").output;
  std::string expected_list;
  for (const joule::cli::Command& c : joule::cli::commands()) {
    const std::string name = c.name;
    expected_list += name + "\n";
    EXPECT_NE(usage.find("  " + name + " "), std::string::npos) << name << " missing from the usage:\n" << usage;
    auto help = run_command(kJoule + " " + name + " --help");
    EXPECT_EQ(help.exit_code, 0) << name << ": " << help.output;
    EXPECT_NE(help.output.find("joule " + name + " [OPTION"), std::string::npos) << name << ": " << help.output;
    auto bogus = run_command(kJoule + " " + name + " --no-such-flag");
    EXPECT_EQ(bogus.exit_code, 2) << name << ": " << bogus.output;
    EXPECT_NE(bogus.output.find("joule " + name + ": error: "), std::string::npos) << name << ": " << bogus.output;
  }
  EXPECT_EQ(listed, expected_list);
  // A mode's flags are refused in the other: plan and plan --inference are two handlers.
  auto mixed = run_command(kJoule + " plan --inference --nodes 4");
  EXPECT_EQ(mixed.exit_code, 2) << mixed.output;
  EXPECT_NE(mixed.output.find("--nodes plans training"), std::string::npos) << mixed.output;
  // An enum flag is parsed at the door, naming its valid words.
  for (const char* command : {" plan", " bench train"}) {
    auto shard = run_command(kJoule + command + " --shard zero2");
    EXPECT_EQ(shard.exit_code, 2) << shard.output;
    EXPECT_NE(shard.output.find("--shard is 'zero2'; valid: none, zero1"), std::string::npos) << shard.output;
  }
  auto other = run_command(kJoule + " plan --rate 10/s");
  EXPECT_EQ(other.exit_code, 2) << other.output;
  EXPECT_NE(other.output.find("--rate sizes an inference fleet: add --inference"), std::string::npos) << other.output;
}

// Two executables share the table (tools/cli/command.h): the front loads no LibTorch, and joule-engine beside it has a
// handler for every command, the front's included, so that it also runs alone.
TEST(Cli, TheFrontLoadsNoLibTorchAndTheEngineServesEveryCommand) {
  const auto libraries = run_command("ldd " + kJoule);
  ASSERT_EQ(libraries.exit_code, 0) << libraries.output;
  for (const char* torch : {"libtorch", "libc10"})
    EXPECT_EQ(libraries.output.find(torch), std::string::npos) << torch << " in the front's libraries:\n"
                                                               << libraries.output;
  const std::string engine = std::filesystem::path(kJoule).parent_path() / "joule-engine";
  EXPECT_NE(run_command("ldd " + engine).output.find("libtorch"), std::string::npos);
  for (const joule::cli::Command& c : joule::cli::commands()) {
    EXPECT_NE(joule::cli::engine_handler(c), nullptr) << c.name << " has no handler in the engine";
    // The front reads an engine command's line first (its door), and only those.
    EXPECT_EQ(c.door != nullptr, c.run == joule::cli::kEngine) << c.name;
    // Every command, run by the engine alone, refuses as the front does: the door is the engine's own reading.
    const auto front = run_command(kJoule + " " + c.name + " --no-such-flag");
    const auto alone = run_command(engine + " " + c.name + " --no-such-flag");
    EXPECT_EQ(front.exit_code, 2) << front.output;
    EXPECT_EQ(alone.exit_code, front.exit_code) << alone.output;
    EXPECT_EQ(alone.output, front.output) << c.name;
  }
}

// A front whose engine is missing (one executable copied alone) says so, and which file it looked for; it still
// answers its own commands, and refuses (or helps with) an engine command's line by itself.
TEST(Cli, AFrontWithoutItsEngineSaysWhatIsMissing) {
  TempDir dir;
  const std::string alone = dir.path() + "/joule";
  std::filesystem::copy_file(kJoule, alone);
  std::filesystem::permissions(alone, std::filesystem::perms::owner_all);
  const auto r = run_command(alone + " version");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("joule version: error: " + dir.path() +
                          "/joule-engine: cannot start joule's engine: No such "
                          "file or directory"),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("what to do: joule-engine is built with joule and must sit beside it"), std::string::npos)
      << r.output;
  const auto front = run_command(alone + " data synth --help");  // a front command needs no engine
  EXPECT_EQ(front.exit_code, 0) << front.output;
  // Nor does an engine command's refusal or help: the front reads its line first.
  const auto refused = run_command(alone + " infer --batch 0");
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("joule infer: error: --batch 0: outside the valid range"), std::string::npos)
      << refused.output;
  const auto help = run_command(alone + " train --help");
  EXPECT_EQ(help.exit_code, 0) << help.output;
  EXPECT_NE(help.output.find("--config"), std::string::npos) << help.output;
}

// A serving command's OpenMP threads spin only where the GEMMs are not OpenBLAS's: bf16 on oneDNN's kernels does not
// use OpenBLAS, bf16 emulated in fp32 GEMMs (no oneDNN bf16 kernels on the CPU) runs where fp32 does, and fp32 runs on
// OpenBLAS only where its kernels match the CPU. The decision on every combination, whatever this host has:
TEST(Cli, ServingGemmsOnOpenblasFollowWhereBf16Runs) {
  using joule::cli::gemms_on_openblas;
  for (const bool matches : {false, true}) {
    EXPECT_EQ(gemms_on_openblas(/*chosen_bf16=*/false, /*bf16_gemms_available=*/false, matches), matches);
    EXPECT_EQ(gemms_on_openblas(false, true, matches), matches);  // fp32 chosen on a bf16 host
    EXPECT_EQ(gemms_on_openblas(true, false, matches), matches);  // bf16 emulated in fp32 GEMMs
    EXPECT_FALSE(gemms_on_openblas(true, true, matches));         // oneDNN's bf16 kernels
  }
  // and the command line's part: the precision read from --precision, either spelling, and a bad one counted as no.
  const auto on_openblas = [](std::vector<std::string> words) {
    std::vector<char*> argv;
    for (std::string& w : words) argv.push_back(w.data());
    return joule::cli::serving_gemms_on_openblas(static_cast<int>(argv.size()), argv.data());
  };
  const bool fp32 = on_openblas({"serve", "--precision", "fp32"});
  EXPECT_EQ(on_openblas({"serve", "--precision=fp32"}), fp32);
  EXPECT_FALSE(on_openblas({"serve", "--precision", "fp8"}));
  if (joule::models::bf16_gemms_available()) {
    EXPECT_FALSE(on_openblas({"serve", "--precision", "bf16"}));
    EXPECT_FALSE(on_openblas({"serve", "--precision=bf16"}));
  }
  const joule::models::WithoutBf16GemmsForTesting without;
  EXPECT_EQ(on_openblas({"serve", "--precision", "bf16"}), fp32);
}

TEST(Cli, VersionNamesEveryLibrary) {
  auto r = run_command(kJoule + " version");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  for (const char* lib : {"joule 0.", "LibTorch ", "MPI ", "HDF5 ", "BLAS ", "Open MPI v"})
    EXPECT_NE(r.output.find(lib), std::string::npos) << lib << " in:\n" << r.output;
}

// A training command missing its thread environment starts over before its libraries initialize (tools/joule_main.cc):
// OpenMP initializes once, with the wait policy joule gives (PASSIVE: no spinning) or the one the user gave, and the
// user's own variables (OMP_DISPLAY_ENV, which makes OpenMP print its settings as it initializes) reach it.
TEST(Cli, ATrainingCommandInitializesOpenMpOnceWithItsThreadEnvironment) {
  const std::string unset =
      "env -u OMP_WAIT_POLICY -u OPENBLAS_THREAD_TIMEOUT -u GOMP_SPINCOUNT OMP_DISPLAY_ENV=verbose ";
  auto count = [](const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  auto given = run_command(unset + kJoule + " version");
  EXPECT_EQ(given.exit_code, 0) << given.output;
  EXPECT_EQ(count(given.output, "OMP_WAIT_POLICY = '"), 1u) << given.output;
  EXPECT_EQ(count(given.output, "OMP_WAIT_POLICY = 'PASSIVE'"), 1u) << given.output;
  EXPECT_EQ(count(given.output, "GOMP_SPINCOUNT = '0'"), 1u) << given.output;  // PASSIVE's: no spinning at all

  auto kept = run_command(unset + "OMP_WAIT_POLICY=active " + kJoule + " version");
  EXPECT_EQ(kept.exit_code, 0) << kept.output;
  EXPECT_EQ(count(kept.output, "OMP_WAIT_POLICY = '"), 1u) << kept.output;
  EXPECT_EQ(count(kept.output, "OMP_WAIT_POLICY = 'ACTIVE'"), 1u) << kept.output;
}

TEST(Cli, VersionWarnsLoudlyOnTheReferenceBlas) {
  const std::string reference = "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3";
  if (!std::filesystem::exists(reference)) GTEST_SKIP() << "no reference BLAS installed at " << reference;
  // Preloading the netlib library makes LibTorch's sgemm_ calls resolve to it, as a wrong
  // update-alternatives choice would.
  // (Under AddressSanitizer its runtime must stay first in the library list; it tolerates this one.)
  auto r = run_command("ASAN_OPTIONS=verify_asan_link_order=0 LD_PRELOAD=" + reference + " " + kJoule + " version");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("WARNING: LibTorch's matmuls run on reference BLAS"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("update-alternatives"), std::string::npos) << r.output;
}

TEST(Cli, ModelInitThenInfo) {
  TempDir dir;
  const std::string out = dir.file("tiny");
  auto init = run_command(kJoule + " model init --config bert-tiny --seed 3 --out " + out);
  ASSERT_EQ(init.exit_code, 0) << init.output;
  auto info = run_command(kJoule + " model info " + out);
  EXPECT_EQ(info.exit_code, 0) << info.output;
  // bert-tiny: (30522+512+2)*128+256 + 2*198272 + 16512 + (16512+256+30522) + 258
  EXPECT_NE(info.output.find("4,433,468"), std::string::npos) << info.output;
  EXPECT_NE(info.output.find("model.safetensors: 46 tensors"), std::string::npos) << info.output;

  auto by_config = run_command(kJoule + " model info --config bert-large");
  EXPECT_EQ(by_config.exit_code, 0) << by_config.output;
  EXPECT_NE(by_config.output.find("336,226,108"), std::string::npos) << by_config.output;
}

TEST(Cli, BadInputIsAClearErrorAndWritesNothing) {
  TempDir dir;
  joule::test::write_file(dir.file("bad.json"), R"({"hidden_size": 10})");
  auto r = run_command(kJoule + " model init --config " + dir.file("bad.json") + " --out " + dir.file("m"));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.output.find("bad.json: missing key"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir.file("m")));

  auto missing = run_command(kJoule + " model init --out " + dir.file("m"));
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.output.find("--config"), std::string::npos) << missing.output;

  auto dtype = run_command(kJoule + " model init --config bert-tiny --dtype F8 --out " + dir.file("m"));
  EXPECT_EQ(dtype.exit_code, 2);  // a bad flag value is a usage error
  EXPECT_NE(dtype.output.find("unsupported dtype 'F8'"), std::string::npos) << dtype.output;
}

TEST(Cli, DataPipelineAsAUserRunsIt) {
  TempDir dir;
  const std::string d = dir.path();
  auto synth = run_command(kJoule + " data synth --out " + d + "/c.txt --documents 300 --seed 4");
  ASSERT_EQ(synth.exit_code, 0) << synth.output;
  auto vocab = run_command(kJoule + " data vocab --input " + d + "/c.txt --out " + d + "/v.txt --size 500");
  ASSERT_EQ(vocab.exit_code, 0) << vocab.output;
  auto create = run_command(kJoule + " data create --input " + d + "/c.txt --vocab " + d + "/v.txt --out " + d +
                            "/shards --seq-len 64 --max-pred 10 --dupe-factor 2 --shards 2 --eval-documents 20");
  ASSERT_EQ(create.exit_code, 0) << create.output;
  EXPECT_NE(create.output.find("eval sequences from 20 held-out documents"), std::string::npos) << create.output;
  // Progress, in a log (not a terminal): lines at tenths of the input with its share, then the whole; --quiet: none.
  for (const auto* run : {&vocab, &create}) {
    const std::string what = run == &vocab ? "data vocab: " : "data create: ";
    EXPECT_NE(run->output.find(what + "done, "), std::string::npos) << run->output;
    EXPECT_EQ(run->output.find('\r'), std::string::npos) << "a terminal's line in a log:\n" << run->output;
  }
  EXPECT_NE(create.output.find(" %), "), std::string::npos) << "no periodic line:\n" << create.output;
  auto quiet = run_command(kJoule + " data vocab --input " + d + "/c.txt --out " + d + "/v2.txt --size 500 --quiet");
  ASSERT_EQ(quiet.exit_code, 0) << quiet.output;
  EXPECT_EQ(quiet.output.find("data vocab: "), std::string::npos) << quiet.output;
  auto inspect = run_command(kJoule + " data inspect " + d + "/shards/train --samples 1");
  ASSERT_EQ(inspect.exit_code, 0) << inspect.output;
  EXPECT_NE(inspect.output.find("2 shard(s)"), std::string::npos) << inspect.output;
  EXPECT_NE(inspect.output.find("length histogram"), std::string::npos) << inspect.output;
  EXPECT_NE(inspect.output.find("[CLS]"), std::string::npos)
      << inspect.output;  // decoded with the vocab beside the data

  joule::test::write_file(d + "/lines.txt", "Hello, World!\nunaffable\n");
  auto tok = run_command(kJoule + " data tokenize --vocab " + std::string(JOULE_TEST_FIXTURES) +
                         "/tokenizer/vocab.txt < " + d + "/lines.txt");
  EXPECT_EQ(tok.exit_code, 0) << tok.output;
  EXPECT_EQ(tok.output, "hello , world !\nun ##aff ##able\n");
  auto cased = run_command(kJoule + " data tokenize --no-lower-case --vocab " + std::string(JOULE_TEST_FIXTURES) +
                           "/tokenizer/vocab.txt < " + d + "/lines.txt");
  EXPECT_EQ(cased.output, "Hello , World !\nun ##aff ##able\n");

  // The order a run reads, for an outside reference: every step holds the global batch, no sequence twice in an epoch.
  auto order = run_command(kJoule + " data order --data " + d + "/shards --global-batch 8 --steps 5 --seed 3 --out " +
                           d + "/order.json");
  ASSERT_EQ(order.exit_code, 0) << order.output;
  const nlohmann::json o = nlohmann::json::parse(joule::test::read_file(d + "/order.json"));
  int64_t rows = 0;
  for (const auto& shard : o["shards"]) rows += shard["rows"].get<int64_t>();
  ASSERT_EQ(o["steps"].size(), 5u);
  std::set<int64_t> seen;
  for (const auto& step : o["steps"]) {
    ASSERT_EQ(step.size(), 8u);
    for (const auto& id : step) {
      EXPECT_LT(id.get<int64_t>(), rows);
      EXPECT_TRUE(seen.insert(id.get<int64_t>()).second) << id;
    }
  }
  auto reseeded = run_command(kJoule + " data order --data " + d +
                              "/shards --global-batch 8 --steps 5 --seed 4 --out " + d + "/order4.json");
  ASSERT_EQ(reseeded.exit_code, 0) << reseeded.output;
  EXPECT_NE(nlohmann::json::parse(joule::test::read_file(d + "/order4.json"))["steps"], o["steps"]);

  auto bad = run_command(kJoule + " data inspect " + d + "/c.txt");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.output.find("c.txt"), std::string::npos) << bad.output;

  // `joule train --data D` on a `data create --out D` directory: D/train, D/eval, D/vocab.txt.
  joule::test::write_file(d + "/run.toml",
                          "[model]\nconfig = \"bert-tiny\"\n[train]\nsteps = 2\nmicro_batch = 4\nthreads = 1\n"
                          "[eval]\nevery_steps = 2\nmax_batches = 1\n");
  // joule train initializes MPI; under AddressSanitizer, Open MPI's unattributable allocations would fail LeakSanitizer
  // at exit (the MPI tests run without it for the same reason: tests/SANITIZERS.md).
  const std::string train_cmd = "ASAN_OPTIONS=\"${ASAN_OPTIONS:-}:detect_leaks=0\" " + kJoule + " train --config " + d +
                                "/run.toml --data " + d + "/shards";
  auto train = run_command(train_cmd + " --run-dir " + d + "/run");
  ASSERT_EQ(train.exit_code, 0) << train.output;
  const std::string config = joule::test::read_file(d + "/run/config.toml");
  EXPECT_NE(config.find("train = \"" + d + "/shards/train\""), std::string::npos) << config;
  EXPECT_NE(config.find("eval = \"" + d + "/shards/eval\""), std::string::npos) << config;
  EXPECT_NE(train.output.find("eval at step 2"), std::string::npos) << train.output;

  // The run's summary and report write figures as people read them: no SI prefix glued to a unit ("4.85k h"), no
  // exponent, durations in s/min/h/days, thousands separated.
  auto summary = run_command(kJoule + " summary " + d + "/run");
  ASSERT_EQ(summary.exit_code, 0) << summary.output;
  auto report = run_command(kJoule + " report " + d + "/run");
  ASSERT_EQ(report.exit_code, 0) << report.output;
  const std::string html = joule::test::read_file(d + "/run/report.html");
  const std::regex prefixed("[0-9][kmMG] ?(h|s|min|Wh|kWh|USD|seq)\\b"),
      exponent("(^|[\\s(=:,])-?[0-9]+(\\.[0-9]+)?e[-+]?[0-9]+([\\s),;%]|$)");  // a number, not an id's "81e0c"
  for (const auto& [what, text] : {std::pair{"summary", summary.output}, std::pair{"report", html}}) {
    std::smatch m;
    EXPECT_FALSE(std::regex_search(text, m, prefixed)) << what << ": " << m.str(0);
    // The report's SVG coordinates are numbers too: only its text (between tags) is read.
    const std::string read = std::regex_replace(text, std::regex("<[^>]*>"), " ");
    EXPECT_FALSE(std::regex_search(read, m, exponent)) << what << ": " << m.str(0);
  }
  EXPECT_NE(summary.output.find("450,000,000 seq: "), std::string::npos) << summary.output;
  EXPECT_TRUE(std::regex_search(summary.output, std::regex("wall time +[0-9.]+ (s|min)"))) << summary.output;

  // joule eval --dump: the first batch, the logits at its masked positions and the losses they give (what
  // tools/device/hf_roundtrip.py compares with HuggingFace's).
  auto dumped = run_command(kJoule + " eval --model " + d + "/run/final --data " + d +
                            "/shards/eval --batch 4 --max-batches 1 "
                            "--precision fp32 --dump " +
                            d + "/dump.safetensors");
  ASSERT_EQ(dumped.exit_code, 0) << dumped.output;
  {
    namespace st = joule::models::safetensors;
    const st::File dump = st::File::open(d + "/dump.safetensors");
    auto tensor = [&](const std::string& name) {
      const st::TensorInfo* t = dump.find(name);
      if (!t) throw std::runtime_error("no tensor '" + name + "' in the dump");
      const auto type = t->dtype == st::DType::I64 ? torch::kInt64 : torch::kFloat;
      return torch::from_blob(const_cast<uint8_t*>(dump.data(*t)), t->shape, type).clone();
    };
    const torch::Tensor positions = tensor("masked_positions"), ids = tensor("masked_ids"),
                        logits = tensor("mlm_logits");
    const torch::Tensor valid = (positions != 0).to(torch::kInt64).cumprod(1).to(torch::kBool);
    ASSERT_EQ(logits.size(0), valid.sum().item<int64_t>());
    EXPECT_EQ(tensor("input_ids").size(0), 4);
    EXPECT_EQ(tensor("nsp_logits").sizes(), (std::vector<int64_t>{4, 2}));
    const double mlm = torch::nn::functional::cross_entropy(logits, ids.masked_select(valid)).item<double>();
    EXPECT_NEAR(mlm, tensor("mlm_loss").item<double>(), 1e-5);
    const double nsp =
        torch::nn::functional::cross_entropy(tensor("nsp_logits"), tensor("next_sentence_labels")).item<double>();
    EXPECT_NEAR(nsp, tensor("nsp_loss").item<double>(), 1e-5);
  }

  // A wrong eval path: the error names it, and the advice names data.eval (not data.train).
  auto no_eval = run_command(train_cmd + " --run-dir " + d + "/run2 --set data.eval=" + d + "/nowhere");
  EXPECT_EQ(no_eval.exit_code, 1) << no_eval.output;
  EXPECT_NE(no_eval.output.find(d + "/nowhere: no such shard directory"), std::string::npos) << no_eval.output;
  EXPECT_NE(no_eval.output.find("what to do: check data.eval"), std::string::npos) << no_eval.output;
  EXPECT_EQ(no_eval.output.find("data.train"), std::string::npos) << no_eval.output;
  EXPECT_FALSE(std::filesystem::exists(d + "/run2"));

  // data create into its own output again: refused (two data sets would mix); --replace swaps a whole new one in.
  const std::string again = kJoule + " data create --input " + d + "/c.txt --vocab " + d + "/v.txt --out " + d +
                            "/shards --seq-len 64 --max-pred 10 --dupe-factor 1 --shards 1";
  auto refused = run_command(again);
  EXPECT_EQ(refused.exit_code, 2) << refused.output;
  EXPECT_NE(refused.output.find("--out " + d + "/shards holds a data set made with other arguments ("),
            std::string::npos)
      << refused.output;
  EXPECT_NE(refused.output.find("dupe_factor: 1 now, 2 there"), std::string::npos) << refused.output;
  EXPECT_TRUE(std::filesystem::exists(d + "/shards/train/part_00001.hdf5"))
      << "the refused run changed the old data set";
  auto replaced = run_command(again + " --replace");
  ASSERT_EQ(replaced.exit_code, 0) << replaced.output;
  EXPECT_FALSE(std::filesystem::exists(d + "/shards/train/part_00001.hdf5")) << "a shard of the old data set is left";
  EXPECT_FALSE(std::filesystem::exists(d + "/shards/eval")) << "the old eval split is left";
  EXPECT_TRUE(std::filesystem::exists(d + "/shards/train/part_00000.hdf5"));
  // The same command again: the data set is already there.
  auto same = run_command(again);
  ASSERT_EQ(same.exit_code, 0) << same.output;
  EXPECT_NE(same.output.find("already holds this data set"), std::string::npos) << same.output;
  // --phase 2 is NVIDIA's phase-2 shape; it does not mix with --seq-len.
  auto phase2 = run_command(kJoule + " data create --input " + d + "/c.txt --vocab " + d + "/v.txt --out " + d +
                            "/phase2 --phase 2 --dupe-factor 1");
  ASSERT_EQ(phase2.exit_code, 0) << phase2.output;
  const auto meta = nlohmann::json::parse(joule::test::read_file(d + "/phase2/metadata.json"));
  EXPECT_EQ(meta["seq_len"], 512);
  EXPECT_EQ(meta["max_predictions"], 80);
  EXPECT_EQ(run_command(kJoule + " data create --input x --vocab y --out z --phase 2 --seq-len 128").exit_code, 2);
  for (const auto& e : std::filesystem::directory_iterator(d))
    EXPECT_EQ(e.path().filename().string().find("shards."), std::string::npos) << "left behind: " << e.path();
}

// `joule plan --inference`: a row per inference profile, this host's from a `joule bench infer --json` result, the
// same rows as JSON and CSV, and errors that name the flag, the file and the line.
TEST(Cli, PlanInferenceSizesEveryProfileAndThisHost) {
  TempDir t;
  // One measurement of this host, in `joule bench infer --json`'s shape (two batch sizes), and one taken on a c7i.
  const std::string bench =
      R"({"impl": "joule", "model": "layoutlm-base", "seq_len": 512, "precision": "bf16", "points": [)"
      R"({"batch": 1, "inferences_per_s": 4.0, "p50_ms": 240, "p99_ms": 260},)"
      R"({"batch": 8, "inferences_per_s": 6.0, "p50_ms": 1300, "p99_ms": 1400}]})";
  joule::test::write_file(t.file("host.json"), bench + "\n");
  joule::test::write_file(
      t.file("c7i.jsonl"),
      R"({"record": "environment"})"
      "\n"
      R"({"impl": "pytorch-eager", "model": "layoutlm-base", "seq_len": 512, "precision": "fp32", "batch": 1, "inferences_per_s": 1, "p50_ms": 1, "p99_ms": 1})"
      "\n"
      R"({"impl": "joule", "model": "layoutlm-base", "seq_len": 512, "precision": "bf16", "batch": 4, "inferences_per_s": 20.0, "p50_ms": 190, "p99_ms": 210})"
      "\n");
  const std::string plan = kJoule + " plan --inference --seq 512 --rate 360000/h --p99-ms 1000 --measured " +
                           t.file("host.json") + ",c7i.xlarge=" + t.file("c7i.jsonl");
  auto r = run_command(plan + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  EXPECT_EQ(j["workload"]["model"], "layoutlm-base");
  EXPECT_EQ(j["workload"]["rate_per_hour"], 360000.0);
  std::map<std::string, nlohmann::json> rows;
  for (const auto& row : j["rows"]) rows[row["instance"]] = row;
  for (const char* name : {"inf1.xlarge", "inf2.xlarge", "g4dn.xlarge", "g5.xlarge", "c5.xlarge", "this host"})
    ASSERT_TRUE(rows.count(name)) << name << " missing in " << r.output;
  // This host: batch 8 breaks the 1000 ms bound, batch 1 meets it: ceil(100 x 1.2 / 4) instances.
  EXPECT_EQ(rows["this host"]["batch"], 1);
  EXPECT_EQ(rows["this host"]["instances"], 30);
  EXPECT_NE(rows["this host"]["basis"].get<std::string>().find("measured on this host"), std::string::npos);
  // The c7i measurement sizes c7i.xlarge, which has no published figure; the PyTorch line was skipped.
  EXPECT_TRUE(rows["c7i.xlarge"]["sized"].get<bool>()) << rows["c7i.xlarge"];
  EXPECT_EQ(rows["c7i.xlarge"]["instances"], 6);  // ceil(100 x 1.2 / 20)
  EXPECT_FALSE(rows["c6i.xlarge"]["sized"].get<bool>());
  for (auto& [name, row] : rows)
    if (row["sized"].get<bool>()) {
      EXPECT_GT(row["usd_per_million"].get<double>(), 0) << name;
      EXPECT_GT(row["kwh_per_million"].get<double>(), 0) << name;
      EXPECT_NEAR(row["usd_per_million"].get<double>(), row["usd_per_hour"].get<double>() / 0.36, 1e-9) << name;
    }
  auto text = run_command(plan);
  ASSERT_EQ(text.exit_code, 0) << text.output;
  for (const char* part : {"layoutlm-base, seq 512, 360,000 inferences/hour (100/s), p99 <= 1000 ms, headroom 20 %",
                           "this host", "cheapest:", "where each throughput comes from:"})
    EXPECT_NE(text.output.find(part), std::string::npos) << part << " not in\n" << text.output;
  auto csv = run_command(plan + " --csv");
  ASSERT_EQ(csv.exit_code, 0) << csv.output;
  EXPECT_EQ(csv.output.rfind("model,seq_len,rate_per_hour,", 0), 0u) << csv.output;
  EXPECT_EQ(static_cast<size_t>(std::count(csv.output.begin(), csv.output.end(), '\n')), j["rows"].size() + 1);
  // Flags of the other mode are refused, not ignored.
  for (const char* line : {" plan --inference --precision fp32", " plan --rate 5/h", " plan --inference --json --csv",
                           " plan --inference --rate 1e13/h", " plan --inference --measured=,x"})
    EXPECT_EQ(run_command(kJoule + line).exit_code, 2) << line;
  // Errors: a rate without a unit, a measurement that is not one, a missing file.
  auto no_unit = run_command(kJoule + " plan --inference --rate 1000000");
  EXPECT_EQ(no_unit.exit_code, 2);
  EXPECT_NE(no_unit.output.find("--rate '1000000' has no unit"), std::string::npos) << no_unit.output;
  joule::test::write_file(t.file("bad.jsonl"), "{\"impl\": \"joule\", \"model\": \"bert-base\"}\n");
  auto bad = run_command(kJoule + " plan --inference --measured " + t.file("bad.jsonl"));
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.output.find(t.file("bad.jsonl") + ":1: not a `joule bench infer` result"), std::string::npos)
      << bad.output;
  auto missing = run_command(kJoule + " plan --inference --measured " + t.file("none.json"));
  EXPECT_EQ(missing.exit_code, 1);
  EXPECT_NE(missing.output.find("none.json: cannot read"), std::string::npos) << missing.output;
}

// An inference run: `joule bench infer --out DIR` writes DIR/inference.json, which `joule summary`, `joule report` and
// `joule plan --inference --measured DIR` read back.
TEST(Cli, InferenceRunSummaryReportAndPlan) {
  TempDir t;
  const std::string dir = t.file("run");
  auto bench = run_command(kJoule + " bench infer --model bert-tiny --batches 1,2 --seconds 0.05 --threads 1 --out " +
                           dir + " --p99-ms 10000");
  ASSERT_EQ(bench.exit_code, 0) << bench.output;
  EXPECT_NE(bench.output.find("wrote " + dir + "/inference.json"), std::string::npos) << bench.output;
  auto summary = run_command(kJoule + " summary " + dir);
  ASSERT_EQ(summary.exit_code, 0) << summary.output;
  for (const char* part : {"joule inference run", "kg CO2/1M", "of peak", "best throughput with p99 <= 10000 ms"})
    EXPECT_NE(summary.output.find(part), std::string::npos) << part << " not in\n" << summary.output;
  auto json = run_command(kJoule + " summary --json " + dir);
  ASSERT_EQ(json.exit_code, 0) << json.output;
  const nlohmann::json j = nlohmann::json::parse(json.output);
  ASSERT_EQ(j["points"].size(), 2u);
#if defined(__x86_64__)
  // One thread: one core's peak for the precision, at the clock joule measures; every point a fraction of it.
  const double peak = j["peak_gflops"].get<double>();
  EXPECT_GT(peak, 0);
#endif
  for (const auto& p : j["points"]) {
    EXPECT_GT(p["inferences_per_s"].get<double>(), 0);
#if defined(__x86_64__)
    EXPECT_GT(p["peak_fraction"].get<double>(), 0);
    EXPECT_LT(p["peak_fraction"].get<double>(), 1);
#endif
    EXPECT_NEAR(p["co2_kg_per_million"].get<double>(),
                p["kwh_per_million"].get<double>() * j["pue"].get<double>() * j["grid_g_per_kwh"].get<double>() / 1e3,
                1e-12);
  }
  // The same run as if each batch size had made 5 calls, then 200: only the first p99 is said to be little more than
  // the slowest call, with the --seconds that would give 100 calls (100 x the p50).
  for (const int calls : {5, 200}) {
    nlohmann::json few = j;
    for (auto& p : few["points"]) p["calls"] = calls;
    const std::string copy = t.file("calls" + std::to_string(calls));
    std::filesystem::create_directories(copy);
    joule::test::write_file(copy + "/inference.json", few.dump() + "\n");
    auto said = run_command(kJoule + " summary " + copy);
    ASSERT_EQ(said.exit_code, 0) << said.output;
    const bool noted = said.output.find(
                           "p99 from 5 calls at batch 1 (the fewest): little more than the slowest call; "
                           "--seconds ") != std::string::npos;
    EXPECT_EQ(noted, calls == 5) << said.output;
  }
  auto report = run_command(kJoule + " report " + dir);
  ASSERT_EQ(report.exit_code, 0) << report.output;
  const std::string html = joule::test::read_file(dir + "/report.html");
  for (const char* part : {"joule inference report", "Throughput against p99 latency", "Cost per million inferences",
                           "<td>this host</td>", "inf2.xlarge", "of the processor's peak"})
    EXPECT_NE(html.find(part), std::string::npos) << part;
  auto plan = run_command(kJoule + " plan --inference --model bert-tiny --measured " + dir + " --json");
  ASSERT_EQ(plan.exit_code, 0) << plan.output;
  EXPECT_EQ(nlohmann::json::parse(plan.output)["rows"].back()["instance"], "this host");
  // A damaged inference.json is refused with its path; the run's other commands say the same.
  joule::test::write_file(dir + "/inference.json", "{\"impl\": \"joule\"}\n");
  auto bad = run_command(kJoule + " summary " + dir);
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.output.find(dir + "/inference.json: not a `joule bench infer` result"), std::string::npos)
      << bad.output;
}

TEST(Cli, PlanComparesInstancesAtTheirOwnPrecision) {
  auto r = run_command(
      kJoule +
      " plan --nodes 16 --instance p4d.24xlarge:tf32 --instance trn1.32xlarge:bf16 --instance p4d.24xlarge --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json rows = nlohmann::json::parse(r.output)["rows"];
  ASSERT_EQ(rows.size(), 3u) << r.output;
  EXPECT_EQ(rows[0]["instance"], "p4d.24xlarge");
  EXPECT_EQ(rows[0]["precision"], "tf32");
  EXPECT_EQ(rows[1]["precision"], "bf16");
  EXPECT_EQ(rows[2]["precision"], "bf16");        // --precision's default
  EXPECT_EQ(rows[0]["optimizer_shard"], "none");  // the word, as in summary.json (not the enum's number)
  auto zero1 = run_command(kJoule + " plan --nodes 16 --instance trn1.32xlarge --shard zero1 --json");
  ASSERT_EQ(zero1.exit_code, 0) << zero1.output;
  EXPECT_EQ(nlohmann::json::parse(zero1.output)["rows"][0]["optimizer_shard"], "zero1") << zero1.output;
  // The same instance is slower at TF32 than in bf16 (half the peak; wider gradients on the wire).
  EXPECT_LT(rows[0]["seq_per_s"].get<double>(), rows[2]["seq_per_s"].get<double>());
  auto text = run_command(kJoule + " plan --nodes 16 --instance p4d.24xlarge:tf32 --instance trn1.32xlarge");
  ASSERT_EQ(text.exit_code, 0) << text.output;
  EXPECT_NE(text.output.find("p4d.24xlarge     tf32"), std::string::npos) << text.output;
  EXPECT_NE(text.output.find("trn1.32xlarge    bf16"), std::string::npos) << text.output;
  auto bad = run_command(kJoule + " plan --instance p4d.24xlarge:int4");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.output.find("--instance p4d.24xlarge:int4: precision 'int4' is unknown; valid: bf16, fp16, tf32, fp32"),
            std::string::npos)
      << bad.output;
}
