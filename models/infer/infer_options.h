// What `joule infer` is asked (infer.h runs it): no LibTorch, so that the joule front reads a command line into it
// before it executes the engine (tools/cli/engine_args.h).
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "models/infer/classifier.h"

namespace joule::models::infer {

struct InferOptions : ClassifierOptions {
  std::string input, output;
  int64_t batch = 8;
  bool skip_bad_lines = false;
  std::function<void(const std::string&)> on_skip;                  // a skipped line's report, or empty
  std::function<void(int64_t lines_done, int64_t of)> on_progress;  // after each batch (a progress line), or empty
};

}  // namespace joule::models::infer
