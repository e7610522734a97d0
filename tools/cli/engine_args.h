// The command lines of the commands joule-engine runs (engine.h), read without LibTorch. The front reads an engine
// command's line through its read_ function before it executes the engine, so that what the engine would refuse at its
// doors (an unknown flag, a number out of its range, an output onto an input, a run config's bad key) is refused in
// milliseconds, with the engine's words; the engine's handler reads the line again through the same function and does
// the work. A read declares the command's flags (its --help and --describe-flags), parses them through the doors of
// flags.h and returns what the work needs; it reads files only to check them (a run config), and on a valid line says
// nothing: a note such as a capped --threads is the engine's to say (flags.h say_notes).
#pragma once

#include <cstdint>
#include <string>

#include "launch/blas_core.h"
#include "models/infer/classifier.h"
#include "models/infer/infer_options.h"
#include "models/precision.h"
#include "tools/bench_comm.h"
#include "tools/bench_data.h"
#include "tools/bench_infer.h"
#include "tools/bench_model_options.h"
#include "tools/bench_train.h"
#include "tools/serve/server.h"
#include "trainer/train_request.h"

namespace joule::cli {

// The table's door for an engine command (command.h): its read, with the result left to the engine.
template <auto read>
void door(int argc, char** argv) {
  (void)read(argc, argv);
}

// `joule train`: the run config from --config, its key flags and --set, validated; presets and configs/ resolved later.
trainer::TrainRequest read_train(int argc, char** argv);

struct EvalArgs {
  std::string model, data, dump;
  int64_t batch = 0, max_batches = 0;
  models::PrecisionSetting precision = models::PrecisionSetting::automatic;
  launch::Fp32GemmSetting fp32_gemm = launch::Fp32GemmSetting::automatic;
};
EvalArgs read_eval(int argc, char** argv);

struct ExportArgs {
  std::string checkpoint, out;
};
ExportArgs read_export(int argc, char** argv);

// `joule version` takes no flag.
void read_version(int argc, char** argv);

struct ModelInitArgs {
  std::string config, out, dtype, architecture;
  uint64_t seed = 0;
  int64_t labels = 0;
};
ModelInitArgs read_model_init(int argc, char** argv);

// `joule model info`: the model directory or config to count.
std::string read_model_info(int argc, char** argv);

struct ModelForwardArgs {
  std::string dir, architecture, inputs, out;
  int64_t labels = 0;
  models::PrecisionSetting precision = models::PrecisionSetting::fp32;
};
ModelForwardArgs read_model_forward(int argc, char** argv);

struct InferArgs {
  models::infer::InferOptions options;  // without its callbacks
  bool quiet = false;
};
InferArgs read_infer(int argc, char** argv);

struct ServeArgs {
  models::infer::ClassifierOptions classifier;
  serve::ServerOptions server;  // without its version
  std::string name;             // the model's name in the URLs
  std::string instance;         // the energy model's instance profile
  int64_t delay_ms = 0;         // --max-queue-delay-ms as given
  bool check = false;
};
ServeArgs read_serve(int argc, char** argv);

struct InferBenchArgs {
  tools::InferBenchOptions options;
  std::string out;  // "": no inference run written
  bool json = false;
};
InferBenchArgs read_bench_infer(int argc, char** argv);

struct ModelBenchArgs {
  tools::ModelBenchOptions options;  // its config not yet resolved
  std::string config;                // a preset, config.json or model directory
  bool json = false;
};
ModelBenchArgs read_bench_model(int argc, char** argv);

// `joule bench train`: its config not yet resolved from model_name.
tools::TrainBenchOptions read_bench_train(int argc, char** argv);
tools::CommBenchOptions read_bench_comm(int argc, char** argv);
tools::BenchDataOptions read_bench_data(int argc, char** argv);

}  // namespace joule::cli
