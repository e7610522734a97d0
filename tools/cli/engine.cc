// The engine's handlers by name, `joule version`, and the serving commands' thread decision (which needs the BLAS
// the engine has loaded).
#include "tools/cli/engine.h"

#include <exception>
#include <iostream>
#include <string>
#include <string_view>

#include "launch/cpu_isa.h"
#include "launch/runtime.h"
#include "launch/util/options.h"
#include "models/bf16_linear.h"
#include "models/precision.h"
#include "tools/cli/engine_args.h"
#include "tools/model_commands.h"

namespace joule::cli {

namespace {

struct EngineEntry {
  std::string_view name;
  Handler run;
};
// Each kEngine entry of the table with its handler.
constexpr EngineEntry kEngineHandlers[] = {
    {"train", train},
    {"eval", eval},
    {"export", export_checkpoint},
    {"version", version},
    {"model init", model_init},
    {"model info", model_info},
    {"model forward", model_forward},
    {"infer", infer},
    {"serve", serve},
    {"bench model", bench_model},
    {"bench infer", bench_infer},
    {"bench comm", bench_comm},
    {"bench data", bench_data},
    {"bench train", bench_train},
};

}  // namespace

Handler engine_handler(const Command& command) {
  if (command.run != kEngine) return command.run;
  for (const EngineEntry& e : kEngineHandlers)
    if (e.name == command.name) return e.run;
  return nullptr;
}

int version(int argc, char** argv) {
  read_version(argc, argv);
  std::string warning;
  std::cout << tools::version_report(&warning) << std::flush;
  if (!warning.empty()) std::cerr << warning;
  return 0;
}

bool serving_gemms_on_openblas(int argc, char** argv) {
  std::string word = "auto";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--precision" && i + 1 < argc) word = argv[i + 1];
    if (arg.rfind("--precision=", 0) == 0) word = arg.substr(12);
  }
  const auto precision = joule::parse_choice<models::PrecisionSetting>(word, models::kPrecisionWords);
  if (!precision) return false;
  try {
    const bool chosen_bf16 =
        models::choose_precision(*precision, /*cuda=*/false, launch::CpuIsa::current()).precision !=
        models::Precision::kFp32;
    const launch::BlasInfo blas = launch::detect_blas();
    return gemms_on_openblas(chosen_bf16, models::bf16_gemms_available(),
                             !blas.core.empty() && !launch::judge_detected_blas(blas).below);
  } catch (const std::exception&) {
    return false;
  }
}

bool gemms_on_openblas(bool chosen_bf16, bool bf16_gemms_available, bool openblas_matches_cpu) {
  if (chosen_bf16 && bf16_gemms_available) return false;  // oneDNN's bf16 kernels, on its OpenMP threads
  return openblas_matches_cpu;                            // fp32, or bf16 emulated in fp32 GEMMs
}

}  // namespace joule::cli
