#include <gtest/gtest.h>

#include <filesystem>

#include "test_util.h"
#include "trainer/run_config.h"

using joule::trainer::RunConfig;
using joule::trainer::RunConfigError;

namespace {
std::string error_of(const std::string& toml) {
  try {
    RunConfig::from_toml_text(toml, "run.toml");
  } catch (const RunConfigError& e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(RunConfig, ShippedConfigsParse) {
  for (const char* name : {"demo-tiny", "bert-large-phase1", "bert-large-phase2"}) {
    SCOPED_TRACE(name);
    RunConfig c = RunConfig::from_toml_file(std::string(JOULE_TEST_FIXTURES) + "/../../configs/" + name + ".toml");
    EXPECT_EQ(c.optimizer.name, "lamb");
  }
  RunConfig p1 = RunConfig::from_toml_file(std::string(JOULE_TEST_FIXTURES) + "/../../configs/bert-large-phase1.toml");
  EXPECT_EQ(p1.train.global_batch, 65536);
  EXPECT_DOUBLE_EQ(p1.optimizer.lr, 6e-3);
  EXPECT_DOUBLE_EQ(p1.optimizer.warmup_fraction, 0.2843);
  EXPECT_EQ(p1.train.steps, 7038);
}

TEST(RunConfig, ErrorsNameTheKeyAndListValidOnes) {
  std::string e = error_of("[train]\nmicro_btach = 4\n");
  EXPECT_NE(e.find("run.toml: unknown key 'train.micro_btach'"), std::string::npos) << e;
  EXPECT_NE(e.find("train.micro_batch"), std::string::npos) << e;
  e = error_of("[train]\nmicro_batch = \"four\"\n");
  EXPECT_NE(e.find("'train.micro_batch' must be an integer"), std::string::npos) << e;
  e = error_of("[optimizer]\nname = \"sgd\"\n");
  EXPECT_NE(e.find("valid values: lamb, adamw"), std::string::npos) << e;
  e = error_of("[train]\nglobal_batch = 100\nmicro_batch = 8\n");
  EXPECT_NE(e.find("train.global_batch 100 is not divisible by train.micro_batch 8"), std::string::npos) << e;
  e = error_of("[nonsense]\nx = 1\n");
  EXPECT_NE(e.find("unknown key 'nonsense.x'"), std::string::npos) << e;
  EXPECT_NE(error_of("[train\n").find("run.toml"), std::string::npos);
  e = error_of("[train]\ndevice = \"gpu\"\n");
  EXPECT_NE(e.find("train.device is \"gpu\"; valid values: cpu, cuda, trainium-sim"), std::string::npos) << e;
  e = error_of("[sim]\nnodes = 0\n");
  EXPECT_NE(e.find("sim.nodes = 0 is outside [1, 65536]"), std::string::npos) << e;
  e = error_of("[accounting]\npue = 0.5\n");
  EXPECT_NE(e.find("accounting.pue must be >= 1"), std::string::npos) << e;
  e = error_of("[train]\nsteps = 1e30\n");  // a whole number beyond int64: an error, not undefined behaviour
  EXPECT_NE(e.find("'train.steps' must be an integer, found 1e+30"), std::string::npos) << e;
  joule::trainer::RunConfig big;
  EXPECT_THROW(big.set("train.steps=2e72"), joule::trainer::RunConfigError);
  e = error_of("[accounting]\nprice_per_hour = \"cheap\"\n");
  EXPECT_NE(e.find("'accounting.price_per_hour' must be a number"), std::string::npos) << e;
}

TEST(RunConfig, EveryNumericKeyIsRangeCheckedAtTheDoorNamingKeyValueAndRange) {
  const std::pair<const char*, const char*> cases[] = {
      {"optimizer.lr=inf", "optimizer.lr = inf is not a finite number; valid: (0, inf)"},
      {"optimizer.lr=nan", "optimizer.lr = nan is not a finite number"},
      {"optimizer.lr=0", "optimizer.lr = 0 is outside (0, inf)"},
      {"optimizer.beta1=1.5", "optimizer.beta1 = 1.5 is outside [0, 1)"},
      {"optimizer.beta2=1", "optimizer.beta2 = 1 is outside [0, 1)"},
      {"optimizer.eps=0", "optimizer.eps = 0 is outside (0, inf)"},
      {"optimizer.weight_decay=-0.1", "optimizer.weight_decay = -0.10000000000000001 is outside [0, inf)"},
      {"optimizer.max_grad_norm=-1", "optimizer.max_grad_norm = -1 is outside [0, inf) (0: no clipping)"},
      {"checkpoint.every_steps=-5", "checkpoint.every_steps = -5 is outside [0, inf) (0: off)"},
      {"checkpoint.every_minutes=-1", "checkpoint.every_minutes = -1 is outside [0, inf) (0: off)"},
      {"train.threads=-2", "train.threads = -2 is outside [0, 4096]"},
      {"train.threads=100000", "train.threads = 100000 is outside [0, 4096]"},
      {"train.micro_batch=99999999999", "train.micro_batch = 99999999999 is outside [1, 1048576]"},
      {"eval.target_mlm_accuracy=2", "eval.target_mlm_accuracy = 2 is outside [0, 1]"},
      {"accounting.grid_intensity=-inf", "accounting.grid_intensity = -inf is not a finite number"},
  };
  for (const auto& [set, expect] : cases) {
    joule::trainer::RunConfig c;
    c.set(set);
    try {
      c.validate();
      ADD_FAILURE() << set << " was accepted";
    } catch (const joule::trainer::RunConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << set << ": " << e.what();
    }
  }
  joule::trainer::RunConfig ok;
  for (const char* set :
       {"optimizer.max_grad_norm=0", "checkpoint.every_steps=0", "optimizer.beta1=0", "train.threads=0"})
    ok.set(set);
  EXPECT_NO_THROW(ok.validate());
}

TEST(RunConfig, InvalidUtf8IsRefusedBeforeTheTomlParserSeesIt) {
  // The 3 bytes ' 0xff ' made Debian's toml11 3.7.1 read past its buffer (tests/fuzz/fuzz_run_config found it).
  std::string e = error_of("'\xff'");
  EXPECT_NE(e.find("run.toml: line 1, byte 2 (0xff): not valid UTF-8 (TOML files must be UTF-8)"), std::string::npos)
      << e;
  e = error_of("[data]\ntrain = \"caf\xc3\xa9\"\nvocab = \"\xed\xa0\x80\"\n");  // a valid é, then a surrogate
  EXPECT_NE(e.find("line 3, byte 33 (0xed): not valid UTF-8"), std::string::npos) << e;
  EXPECT_NE(error_of("[train]\nseed = 1 # \xc0\xaf overlong\n").find("line 2, byte 20 (0xc0)"), std::string::npos);
  joule::trainer::RunConfig c;
  try {
    c.set("data.train=\xe2\x82");
    ADD_FAILURE() << "a truncated UTF-8 sequence was accepted";
  } catch (const joule::trainer::RunConfigError& err) {
    EXPECT_NE(std::string(err.what()).find("--set data.train: line 1, byte 1 (0xe2): not valid UTF-8"),
              std::string::npos)
        << err.what();
  }
  EXPECT_EQ(joule::trainer::RunConfig::from_toml_text("[data]\ntrain = \"日本/café\"\n", "ok.toml").data.train,
            "日本/café");
}

TEST(RunConfig, LongStringsWithSpacesAndEscapesReadBackTheSame) {
  // toml::format wrapped strings over 80 columns with line-ending backslashes, dropping the next line's
  // leading spaces on reading back (found by tests/fuzz/fuzz_run_config).
  for (int n = 60; n < 200; ++n) {  // with toml::format, n = 74, 78, 79, 153, ... lost a space
    joule::trainer::RunConfig c;
    const std::string path = std::string(static_cast<size_t>(n), 'x') + "  two spaces/\"quoted\"\\tab\there/日本";
    c.set("data.train=" + path);
    const std::string resolved = c.to_toml();
    const auto back = joule::trainer::RunConfig::from_toml_text(resolved, "resolved.toml");
    ASSERT_EQ(back.data.train, path) << "n = " << n;
    EXPECT_EQ(back.to_toml(), resolved);
  }
}

TEST(RunConfig, SetOverridesByTypeAndRoundTrips) {
  RunConfig c;
  c.set("optimizer.lr=4e-3");
  c.set("train.target_sequences=450e6");
  c.set("data.train=/data/phase1");
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 4e-3);
  EXPECT_EQ(c.train.target_sequences, 450000000);
  EXPECT_EQ(c.data.train, "/data/phase1");
  // Quoted as in the TOML file: the quotes are not part of the path (they used to be, making a directory '"').
  c.set("run.dir=\"/scratch/run 1\"");
  EXPECT_EQ(c.run.dir, "/scratch/run 1");
  c.set("data.eval='C:\\eval'");
  EXPECT_EQ(c.data.eval, "C:\\eval");
  EXPECT_THROW(c.set("run.dir=\"unterminated\\\""), RunConfigError);
  EXPECT_THROW(c.set("train.steps=1.5"), RunConfigError);
  EXPECT_THROW(c.set("optimizer.lr=fast"), RunConfigError);
  EXPECT_THROW(c.set("optimizer.lrr=1"), RunConfigError);
  EXPECT_THROW(c.set("no-equals"), RunConfigError);
  RunConfig back = RunConfig::from_toml_text(c.to_toml(), "resolved");
  EXPECT_EQ(back.to_toml(), c.to_toml());
  EXPECT_DOUBLE_EQ(back.optimizer.lr, 4e-3);
  EXPECT_EQ(back.train.target_sequences, 450000000);
}

// What a resume says when the config differs from the checkpoint's: each key with both values, whether the run stays
// the one its earlier steps belong to, and never a path spelled another way.
TEST(RunConfig, ConfigChangesNameEachKeyBothValuesAndWhetherTheRunStaysTheSame) {
  joule::test::TempDir dir;
  std::filesystem::create_directories(dir.path() + "/shards/train");
  RunConfig before;
  before.data.train = dir.path() + "/shards/train";
  before.optimizer.lr = 0.01;
  before.train.steps = 40;
  RunConfig after = before;
  after.data.train = dir.path() + "/shards/./train/";  // the same directory
  EXPECT_TRUE(joule::trainer::config_changes(before, after).empty());

  after.optimizer.lr = 0.02;
  after.train.steps = 44;
  after.checkpoint.every_steps = 5;
  const auto changes = joule::trainer::config_changes(before, after);
  ASSERT_EQ(changes.size(), 3u);
  EXPECT_EQ(changes[0].key, "train.steps");  // config.toml's order: [train], [optimizer], [checkpoint]
  EXPECT_EQ(changes[0].before, "40");
  EXPECT_EQ(changes[0].after, "44");
  EXPECT_TRUE(changes[0].safe);
  EXPECT_NE(changes[0].note.find("learning-rate schedule"), std::string::npos) << changes[0].note;
  EXPECT_EQ(changes[1].key, "optimizer.lr");
  EXPECT_EQ(changes[1].before, "0.01");
  EXPECT_EQ(changes[1].after, "0.02");
  EXPECT_FALSE(changes[1].safe);
  EXPECT_EQ(changes[2].key, "checkpoint.every_steps");
  EXPECT_TRUE(changes[2].safe);

  after = before;
  after.data.train = dir.path() + "/other";  // another directory: a change that is not safe
  const auto data = joule::trainer::config_changes(before, after);
  ASSERT_EQ(data.size(), 1u);
  EXPECT_FALSE(data[0].safe);
}
