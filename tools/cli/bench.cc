// `joule bench infer|model|comm|train|data`: throughput of each part on this machine, against what it allows. Their
// command lines are read in engine_args.cc.
#include <iostream>
#include <string>

#include "tools/bench_comm.h"
#include "tools/bench_data.h"
#include "tools/bench_infer.h"
#include "tools/bench_model.h"
#include "tools/bench_train.h"
#include "tools/cli/engine.h"
#include "tools/cli/engine_args.h"
#include "tools/model_commands.h"

namespace joule::cli {

int bench_infer(int argc, char** argv) {
  const InferBenchArgs a = read_bench_infer(argc, argv);
  const auto result = tools::bench_infer(a.options);
  std::cout << (a.json ? result.to_json() + "\n" : result.to_text()) << std::flush;
  if (!a.out.empty()) {
    const std::string file = tools::write_inference_run(result, a.out);
    if (!a.json) std::cout << "wrote " << file << "\n";
  }
  return 0;
}

int bench_model(int argc, char** argv) {
  ModelBenchArgs a = read_bench_model(argc, argv);
  a.options.config = tools::resolve_model_config(a.config);
  std::string warning;
  tools::version_report(&warning, /*with_gemm_path=*/false);  // bench_model measures it
  if (!warning.empty()) std::cerr << warning;
  auto result = tools::bench_model(a.options);
  std::cout << (a.json ? result.to_json() + "\n" : result.to_text(a.options));
  return 0;
}

int bench_train(int argc, char** argv) {
  tools::TrainBenchOptions b = read_bench_train(argc, argv);
  b.config = tools::resolve_model_config(b.model_name);
  const std::string line = tools::bench_train(b);
  if (!line.empty()) std::cout << line << std::endl;
  return 0;
}

int bench_comm(int argc, char** argv) { return tools::bench_comm(read_bench_comm(argc, argv)); }

int bench_data(int argc, char** argv) {
  std::cout << tools::bench_data(read_bench_data(argc, argv));
  return 0;
}

}  // namespace joule::cli
