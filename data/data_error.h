// The error of the data commands (`joule data create`, `vocab`, `synth`) for input text that cannot make what was
// asked: too few documents, no words, too few sequences for the shards. No LibTorch.
#pragma once

#include <string>
#include <utility>

#include "launch/util/error.h"

namespace joule::data {

class CorpusError : public joule::Error {
 public:
  explicit CorpusError(const std::string& message,
                       std::string hint =
                           "give more input text (documents separated by blank lines), or ask for fewer shards or "
                           "eval documents")
      : joule::Error(message, std::move(hint)) {}
};

// Batch arithmetic the data cannot serve (a global batch larger than the dataset, one that does not split).
class SamplerError : public joule::Error {
 public:
  explicit SamplerError(const std::string& message,
                        std::string hint =
                            "make train.global_batch a multiple of train.micro_batch x ranks and no larger than the "
                            "dataset, or train on more data")
      : joule::Error(message, std::move(hint), ErrorKind::usage) {}
};

}  // namespace joule::data
