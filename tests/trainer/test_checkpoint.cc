// The checkpoint reader: checked access to trainer_state.json and manifest.json names the file and the missing or
// mistyped key; a manifest of the wrong shape is skipped with its reason by --resume auto, never thrown.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "launch/util/hash.h"
#include "models/bert.h"
#include "test_util.h"
#include "trainer/checkpoint.h"
#include "trainer/optimizer.h"

namespace {

// A checkpoint directory that verifies (COMPLETE, a manifest with the right checksum) whose trainer_state.json is
// `state`: only the checked reading of trainer_state.json can refuse it.
std::string checkpoint_with_state(const joule::test::TempDir& dir, const std::string& state) {
  return joule::test::write_checkpoint_dir(dir.file("step_00000001"), {{"trainer_state.json", state}});
}

TEST(Errors, TheCheckpointReaderNamesAMissingOrMistypedKey) {
  joule::test::TempDir dir;
  joule::models::BertForPreTraining model(joule::test::small_bert(50, 16, 2, 32, 16));
  auto optimizer = joule::trainer::create_optimizer({}, model->hf_named_parameters());
  const std::string good =
      R"("epoch": 0, "position": 0, "sequences": 8, "wall_seconds": 1.0, "segments": 1, "world_size": 1, "config_hash": "x", "optimizer_steps": 1)";
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
  joule::test::write_file(
      ck + "/manifest.json",
      R"({"format": "joule-checkpoint", "format_version": 1, "files": {"trainer_state.json": {"bytes": "2"}}})");
  std::vector<std::string> warnings;
  EXPECT_FALSE(joule::trainer::find_latest_checkpoint(dir.path(), &warnings));
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("files.trainer_state.json: key 'bytes' holds \"2\""), std::string::npos) << warnings[0];
}

}  // namespace

// A manifest's entries name files of the checkpoint only: one that leads out (.., an absolute path, a symbolic link to
// a file elsewhere) makes the checkpoint fail verification, named, before the file is read; a manifest that does not
// list the model, the optimizer state or the trainer state fails too.
TEST(Checkpoints, AManifestEntryThatLeadsOutOfTheCheckpointFailsVerification) {
  joule::test::TempDir dir;
  joule::test::write_file(dir.file("secret"), "not the checkpoint's");
  const std::string ck = joule::test::write_checkpoint_dir(dir.file("good"), {});
  EXPECT_EQ(joule::trainer::verify_checkpoint(ck), "");
  const std::string hash = joule::hex64(joule::fnv1a64_file(dir.file("secret")));
  const auto with_entry = [&](const std::string& name, const std::string& entry) {
    const std::string c = joule::test::write_checkpoint_dir(dir.file(name), {});
    std::string manifest = joule::test::read_file(c + "/manifest.json");
    manifest.insert(manifest.rfind("}}"), ", \"" + entry + "\": {\"bytes\": 20, \"fnv1a64\": \"" + hash + "\"}");
    joule::test::write_file(c + "/manifest.json", manifest);
    return c;
  };
  const std::string up = with_entry("up", "../secret");
  EXPECT_NE(joule::trainer::verify_checkpoint(up).find("manifest.json: entry \"../secret\" climbs out"),
            std::string::npos)
      << joule::trainer::verify_checkpoint(up);
  const std::string absolute = with_entry("absolute", dir.file("secret"));
  EXPECT_NE(joule::trainer::verify_checkpoint(absolute).find("is an absolute path"), std::string::npos)
      << joule::trainer::verify_checkpoint(absolute);
  const std::string linked = with_entry("linked", "rng_rank_0.bin");
  std::filesystem::create_symlink(dir.file("secret"), linked + "/rng_rank_0.bin");
  EXPECT_NE(
      joule::trainer::verify_checkpoint(linked).find("entry \"rng_rank_0.bin\" resolves to " + dir.file("secret")),
      std::string::npos)
      << joule::trainer::verify_checkpoint(linked);
  const std::string bare = joule::test::write_checkpoint_dir(dir.file("bare"), {});
  joule::test::write_file(bare + "/manifest.json",
                          R"({"format": "joule-checkpoint", "format_version": 1, "files": {}})");
  EXPECT_EQ(joule::trainer::verify_checkpoint(bare), "manifest.json does not list model.safetensors");
}

TEST(Checkpoints, OnlyJoulesOwnNamesAreCandidatesNewestFirst) {
  joule::test::TempDir dir;
  for (const char* name : {"step_00000005", "step_00000010", "step_00000015.tmp", "step_00000006_before_lr_change",
                           "best", "step_12", "step_00000007.bak"})
    std::filesystem::create_directories(dir.path() + "/" + name);
  const std::vector<std::string> listed = joule::trainer::list_checkpoints(dir.path());
  ASSERT_EQ(listed.size(), 3u);
  EXPECT_EQ(std::filesystem::path(listed[0]).filename(), "step_00000015.tmp");  // a torn write: listed, never complete
  EXPECT_EQ(std::filesystem::path(listed[1]).filename(), "step_00000010");
  EXPECT_EQ(std::filesystem::path(listed[2]).filename(), "step_00000005");
  EXPECT_TRUE(joule::trainer::list_checkpoints(dir.path() + "/absent").empty());
}

TEST(Checkpoints, ARankThatSeesAnotherManifestThanRank0FailsClearly) {
  joule::test::TempDir dir;
  joule::models::BertForPreTraining model(joule::test::small_bert(50, 16, 2, 32, 16));
  auto optimizer = joule::trainer::create_optimizer({}, model->hf_named_parameters());
  const std::string ck = checkpoint_with_state(dir, "{}");
  try {
    joule::trainer::load_checkpoint(ck, model, *optimizer, 1, 2, "0123456789abcdef");
    ADD_FAILURE() << "loaded a checkpoint whose manifest differs from rank 0's";
  } catch (const joule::trainer::CheckpointError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "rank 1 does not see the checkpoint rank 0 verified: its manifest.json differs from rank 0's"),
              std::string::npos)
        << e.what();
  }
}
