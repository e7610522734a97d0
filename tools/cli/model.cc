// `joule model init|info|forward`: HuggingFace model directories made, counted and run. Their command lines are read
// in engine_args.cc.
#include <iostream>

#include "tools/cli/engine.h"
#include "tools/cli/engine_args.h"
#include "tools/model_commands.h"

namespace joule::cli {

int model_init(int argc, char** argv) {
  const ModelInitArgs a = read_model_init(argc, argv);
  std::cout << tools::model_init(a.config, a.seed, a.out, a.dtype, a.architecture, a.labels) << "\n";
  return 0;
}

int model_info(int argc, char** argv) {
  std::cout << tools::model_info(read_model_info(argc, argv));
  return 0;
}

int model_forward(int argc, char** argv) {
  const ModelForwardArgs a = read_model_forward(argc, argv);
  std::cout << tools::model_forward(a.dir, a.architecture, a.labels, a.inputs, a.out, a.precision) << std::flush;
  return 0;
}

}  // namespace joule::cli
