// The [data] section of the run config: the training shards, the held-out shards and the vocabulary they were
// made with. No LibTorch.
#pragma once

#include <string>
#include <vector>

#include "launch/util/options.h"

namespace joule::data {

struct DataOptions {
  static constexpr const char* kTable = "data";
  std::string train;  // shard directory, glob or list (or a `joule data create` output: its train/ and eval/)
  std::string eval;   // "": no eval
  std::string vocab;  // "": vocab.txt beside the shards

  std::vector<OptionField> fields() { return {{"train", &train}, {"eval", &eval}, {"vocab", &vocab}}; }
  void validate() const {}
};

}  // namespace joule::data
