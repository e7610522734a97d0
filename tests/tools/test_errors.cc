// The one error model: every library's error is a joule::Error with a "what to do" hint and the exit code of its kind
// (usage 2, runtime 1).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collectives/communicator.h"
#include "data/data_error.h"
#include "data/hdf5.h"
#include "data/shard.h"
#include "data/tokenizer.h"
#include "launch/placement.h"
#include "launch/util/error.h"
#include "models/bert_config.h"
#include "models/safetensors.h"
#include "trainer/checkpoint.h"
#include "trainer/cost/energy.h"
#include "trainer/cost/hardware.h"
#include "trainer/fault.h"
#include "trainer/run_config.h"
#include "trainer/train_step.h"

namespace {

struct Case {
  std::string name;
  std::function<void()> raise;
  int exit_code;
};

TEST(Errors, EveryLibraryErrorIsAJouleErrorWithAHintAndItsExitCode) {
  const std::vector<Case> cases = {
      {"UsageError", [] { throw joule::UsageError("x"); }, 2},
      {"IoError", [] { throw joule::IoError("x"); }, 1},
      {"InternalError", [] { throw joule::InternalError("x"); }, 1},
      {"CollectiveError", [] { throw joule::collectives::CollectiveError("x"); }, 1},
      {"CollectiveTimeout", [] { throw joule::collectives::CollectiveTimeout("x"); }, 1},
      {"CorpusError", [] { throw joule::data::CorpusError("x"); }, 1},
      {"SamplerError", [] { throw joule::data::SamplerError("x"); }, 2},
      {"Hdf5Error", [] { throw joule::data::Hdf5Error("x"); }, 1},
      {"ShardError", [] { throw joule::data::ShardError("x"); }, 1},
      {"VocabError", [] { throw joule::data::VocabError("x"); }, 1},
      {"LaunchError", [] { throw joule::launch::LaunchError("x"); }, 1},
      {"ModelConfigError", [] { throw joule::models::ModelConfigError("x"); }, 1},
      {"FormatError", [] { throw joule::models::safetensors::FormatError("x"); }, 1},
      {"CheckpointError", [] { throw joule::trainer::CheckpointError("x"); }, 1},
      {"RunConfigError", [] { throw joule::RunConfigError("x"); }, 2},
      {"FaultError", [] { throw joule::trainer::FaultError("x"); }, 2},
      {"ProfileError", [] { throw joule::cost::ProfileError("x"); }, 1},
      {"MeterUnavailable", [] { throw joule::cost::MeterUnavailable("x"); }, 1},
      {"NonFiniteError", [] { throw joule::trainer::NonFiniteError("x"); }, 1},
  };
  for (const Case& c : cases) {
    try {
      c.raise();
      ADD_FAILURE() << c.name << " did not throw";
    } catch (const joule::Error& e) {
      EXPECT_EQ(std::string(e.what()), "x") << c.name;
      EXPECT_GT(e.hint().size(), 20u) << c.name << " has no useful hint";
      EXPECT_EQ(e.exit_code(), c.exit_code) << c.name;
    } catch (...) {
      ADD_FAILURE() << c.name << " is not a joule::Error";
    }
  }
}

}  // namespace
