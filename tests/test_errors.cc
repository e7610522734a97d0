// The one error model: every library's error is a joule::Error with a "what to do" hint and the exit code of its kind
// (usage 2, runtime 1); the checkpoint reader's checked access names the file and the missing or mistyped key.
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
#include "launch/error.h"
#include "launch/placement.h"
#include "models/bert.h"
#include "models/bert_config.h"
#include "models/safetensors.h"
#include "test_util.h"
#include "trainer/checkpoint.h"
#include "trainer/cost/energy.h"
#include "trainer/cost/hardware.h"
#include "trainer/fault.h"
#include "trainer/optimizer.h"
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
      {"ConfigError", [] { throw joule::models::ConfigError("x"); }, 1},
      {"FormatError", [] { throw joule::models::safetensors::FormatError("x"); }, 1},
      {"CheckpointError", [] { throw joule::trainer::CheckpointError("x"); }, 1},
      {"RunConfigError", [] { throw joule::trainer::RunConfigError("x"); }, 2},
      {"FaultError", [] { throw joule::trainer::FaultError("x"); }, 2},
      {"ProfileError", [] { throw joule::trainer::ProfileError("x"); }, 1},
      {"MeterUnavailable", [] { throw joule::trainer::MeterUnavailable("x"); }, 1},
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

// A checkpoint directory that verifies (COMPLETE, a manifest with the right checksum) whose trainer_state.json is
// `state`: only the checked reading of trainer_state.json can refuse it.
std::string checkpoint_with_state(const joule::test::TempDir& dir, const std::string& state) {
  const std::string ck = dir.file("step_00000001");
  std::filesystem::create_directories(ck);
  joule::test::write_file(ck + "/trainer_state.json", state);
  char hex[17];
  std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(joule::trainer::fnv1a64_file(ck + "/trainer_state.json")));
  joule::test::write_file(ck + "/manifest.json", R"({"format": "joule-checkpoint", "format_version": 1, "files": {"trainer_state.json": {"bytes": )" +
                                                     std::to_string(state.size()) + R"(, "fnv1a64": ")" + hex + R"("}}})");
  joule::test::write_file(ck + "/COMPLETE", "");
  return ck;
}

TEST(Errors, TheCheckpointReaderNamesAMissingOrMistypedKey) {
  joule::test::TempDir dir;
  joule::models::BertForPreTraining model(joule::test::small_bert(50, 16, 2, 32, 16));
  auto optimizer = joule::trainer::create_optimizer({}, model->hf_named_parameters());
  const std::string good = R"("epoch": 0, "position": 0, "sequences": 8, "wall_seconds": 1.0, "segments": 1, "world_size": 1, "config_hash": "x", "optimizer_steps": 1)";
  struct Bad {
    std::string state, expect;
  };
  for (const Bad& b : {Bad{"{" + good + "}", "trainer_state.json: missing key 'step'"},
                       Bad{R"({"step": "one", )" + good + "}", "trainer_state.json: key 'step' holds \"one\" (string)"},
                       Bad{"{not json", "trainer_state.json: not valid JSON"}}) {
    joule::test::TempDir d;
    const std::string ck = checkpoint_with_state(d, b.state);
    try {
      joule::trainer::load_checkpoint(ck, model, *optimizer, 0, 1);
      ADD_FAILURE() << "accepted " << b.state;
    } catch (const joule::trainer::CheckpointError& e) {
      EXPECT_NE(std::string(e.what()).find(b.expect), std::string::npos) << e.what();
    }
  }
}

TEST(Errors, AManifestOfTheWrongShapeIsSkippedWithItsReasonNotThrown) {
  joule::test::TempDir dir;
  const std::string ck = checkpoint_with_state(dir, "{}");
  joule::test::write_file(ck + "/manifest.json", R"({"format": "joule-checkpoint", "format_version": 1, "files": {"trainer_state.json": {"bytes": "2"}}})");
  std::vector<std::string> warnings;
  EXPECT_FALSE(joule::trainer::find_latest_checkpoint(dir.path(), &warnings));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("files.trainer_state.json: key 'bytes' holds \"2\""), std::string::npos) << warnings[0];
}

}  // namespace
