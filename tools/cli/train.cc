// `joule train`, `joule eval` and `joule export`: a run, a model's accuracy, a checkpoint as a model directory. Their
// command lines are read in engine_args.cc.
#include <iostream>
#include <string>

#include "launch/cpu_isa.h"
#include "launch/runtime.h"
#include "models/precision.h"
#include "tools/cli/engine.h"
#include "tools/cli/engine_args.h"
#include "trainer/trainer.h"

namespace joule::cli {

int train(int argc, char** argv) { return trainer::train(read_train(argc, argv)); }

int eval(int argc, char** argv) {
  const EvalArgs a = read_eval(argc, argv);
  const auto precision = models::choose_precision(a.precision, false, launch::CpuIsa::current());
  const launch::GemmPath gemm = launch::choose_gemm_path(a.fp32_gemm);
  const std::string result = trainer::evaluate_model_dir(a.model, a.data, a.batch, a.max_batches, precision.precision,
                                                         a.dump, gemm.choice.fp32)
                                 .to_json()
                                 .dump();
  // After the evaluation: an error is not preceded by them.
  std::cerr << "joule eval: " << precision.reason << "\ngemm: " << gemm.line() << "\n";
  std::cout << result << "\n";
  return 0;
}

int export_checkpoint(int argc, char** argv) {
  const ExportArgs a = read_export(argc, argv);
  const std::string used = trainer::export_checkpoint(a.checkpoint, a.out);
  std::cout << "exported " << used << " to " << a.out << "\n";
  return 0;
}

}  // namespace joule::cli
