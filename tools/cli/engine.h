// The engine's side of the command table (command.h): the handlers of the commands that load LibTorch, run by
// `joule-engine` (tools/engine_main.cc), which the front executes for them. The engine runs every command: the front's
// own handlers too, so that joule-engine (and the tests' joule-fault-injection) stands alone.
#pragma once

#include "tools/cli/command.h"

namespace joule::cli {

// The handler the engine runs `command` with: its own for a kEngine entry, else the front's; nullptr for none (a test
// walks the table and asserts every command has one).
Handler engine_handler(const Command& command);

// Whether a serving command's GEMMs will run on OpenBLAS's own threads: fp32 (as its --precision sets, or auto without
// native bf16 matmuls), or bf16 emulated in fp32 GEMMs (models/bf16_linear.h bf16_gemms_available), on an OpenBLAS
// whose kernels match the CPU. A --precision the command will reject counts as no.
bool serving_gemms_on_openblas(int argc, char** argv);
// The decision itself, from what the command chose and what the host has: bf16 GEMMs run on oneDNN's threads where
// oneDNN has bf16 kernels, everything else on the fp32 path, which is OpenBLAS's where its kernels match the CPU.
bool gemms_on_openblas(bool chosen_bf16, bool bf16_gemms_available, bool openblas_matches_cpu);

// The engine's handlers (each in its group's file).
int train(int argc, char** argv);
int eval(int argc, char** argv);
int export_checkpoint(int argc, char** argv);
int version(int argc, char** argv);
int model_init(int argc, char** argv);
int model_info(int argc, char** argv);
int model_forward(int argc, char** argv);
int infer(int argc, char** argv);
int serve(int argc, char** argv);
int bench_infer(int argc, char** argv);
int bench_model(int argc, char** argv);
int bench_comm(int argc, char** argv);
int bench_train(int argc, char** argv);
int bench_data(int argc, char** argv);

}  // namespace joule::cli
