// The flags of the commands that load a classifier directory (`joule infer`, `joule serve`), declared and read in one
// place: --architecture, --precision, --max-length, --threads, --cased, --allow-untrained-head.
#pragma once

#include <string>

#include <cxxopts.hpp>

#include "models/infer/classifier.h"

namespace joule::cli {

// Adds the flags.
void add_classifier_flags(cxxopts::Options& options);

// The ClassifierOptions they give for the directory `model_dir`.
models::infer::ClassifierOptions classifier_options(const cxxopts::ParseResult& r, const std::string& model_dir);

}  // namespace joule::cli
