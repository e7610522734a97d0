#include <gtest/gtest.h>

#include <filesystem>

#include "test_util.h"
#include "trainer/run_config.h"

using joule::RunConfigError;
using joule::trainer::RunConfig;

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
    EXPECT_EQ(c.optimizer.name, joule::trainer::OptimizerName::lamb);
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
  EXPECT_THROW(big.set("train.steps=2e72"), joule::RunConfigError);
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
    } catch (const joule::RunConfigError& e) {
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
  } catch (const joule::RunConfigError& err) {
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

// RUN/config.toml holds what the run used: each key the config left automatic with the value the run worked out and
// its source as a comment, keys the config set as set; read back, it is the same config with those values filled in,
// and a resume that compares it with the checkpoint's (automatic) config finds nothing changed.
TEST(RunConfig, UsedConfigHoldsTheResolvedValuesWithTheirSourceAndReadsBack) {
  RunConfig cfg;
  cfg.train.steps = 600;
  cfg.train.micro_batch = 32;
  cfg.data.train = "demo/shards/train";
  cfg.accounting.pue = 1.2;  // set by the user: kept, no comment
  const std::vector<joule::trainer::AutomaticValue> used = {
      {"train.steps", "", "0: from train.target_sequences"},
      {"train.global_batch", "64", "micro_batch 32 x accumulation 1 x 2 rank(s)"},
      {"train.threads", "1", "this node's 2 core(s) / 2 rank(s) on it"},
      {"train.precision", "bf16", "this CPU has bf16 matmul instructions"},
      {"data.vocab", "demo/shards/vocab.txt", "vocab.txt beside the shards"},
      {"accounting.price_per_hour", "0.085", "USD per instance-hour, profile cpu-host.toml"},
      {"accounting.pue", "1.58", "profile cpu-host.toml"},
      {"accounting.grid_intensity", "475", "g CO2/kWh, grid-intensity.toml region world"},
  };
  const std::string text = joule::trainer::used_config_toml(cfg, used);
  for (const char* line :
       {"\nsteps = 600\n", "\nglobal_batch = 64  # auto: micro_batch 32 x accumulation 1 x 2 rank(s)\n",
        "\nthreads = 1  # auto: this node's 2 core(s) / 2 rank(s) on it\n",
        "\nprecision = \"bf16\"  # auto: this CPU has bf16 matmul instructions\n",
        "\nvocab = \"demo/shards/vocab.txt\"  # auto: vocab.txt beside the shards\n",
        "\nprice_per_hour = 0.085  # auto: USD per instance-hour, profile cpu-host.toml\n", "\npue = 1.2\n",
        "\ngrid_intensity = 475.0  # auto: g CO2/kWh, grid-intensity.toml region world\n"})
    EXPECT_NE(text.find(line), std::string::npos) << line << " not in\n" << text;
  const RunConfig back = RunConfig::from_toml_text(text, "config.toml");
  EXPECT_EQ(back.to_toml(), joule::trainer::with_automatic_values(cfg, used).to_toml());
  EXPECT_EQ(back.train.global_batch, 64);
  EXPECT_DOUBLE_EQ(back.accounting.price_per_hour, 0.085);
  EXPECT_DOUBLE_EQ(back.accounting.pue, 1.2);
  // Given back, the filled-in file is its own used config (nothing left automatic, so no comment).
  EXPECT_EQ(joule::trainer::used_config_toml(back, used).find("  # auto: "), std::string::npos);
  // A resume compares both sides with the automatic keys filled in: the checkpoint's "auto" and the file's values
  // are the same run; a value that differs from what auto gave is still a change.
  using joule::trainer::config_changes, joule::trainer::with_automatic_values;
  EXPECT_TRUE(config_changes(with_automatic_values(cfg, used), with_automatic_values(back, used)).empty());
  RunConfig other = back;
  other.train.global_batch = 128;
  const auto changes = config_changes(with_automatic_values(cfg, used), with_automatic_values(other, used));
  ASSERT_EQ(changes.size(), 1u);
  EXPECT_EQ(changes[0].key, "train.global_batch");
  EXPECT_EQ(changes[0].before, "64");
}

// optimizer.shard is a closed set held as an enum: parsed once at the door (TOML and --set), written back as its word,
// and a word outside the set is refused there, naming the key and the valid words.
TEST(RunConfig, AChoiceKeyIsParsedIntoItsEnumAndWrittenBackAsItsWord) {
  using joule::trainer::OptimizerSharding;
  RunConfig c = RunConfig::from_toml_text("[optimizer]\nshard = \"zero1\"\n", "run.toml");
  EXPECT_EQ(c.optimizer.shard, OptimizerSharding::zero1);
  EXPECT_NE(c.to_toml().find("shard = \"zero1\""), std::string::npos) << c.to_toml();
  EXPECT_EQ(RunConfig::from_toml_text(c.to_toml(), "back.toml").optimizer.shard, OptimizerSharding::zero1);
  c.set("optimizer.shard=none");
  EXPECT_EQ(c.optimizer.shard, OptimizerSharding::none);
  c.set("optimizer.shard=\"zero1\"");
  EXPECT_EQ(c.optimizer.shard, OptimizerSharding::zero1);
  EXPECT_EQ(error_of("[optimizer]\nshard = \"zero2\"\n"),
            "run config: optimizer.shard is \"zero2\"; valid values: none, zero1, auto");
  EXPECT_NE(error_of("[optimizer]\nshard = 1\n").find("key 'optimizer.shard' must be a string"), std::string::npos);
  try {
    c.set("optimizer.shard=ZERO1");
    ADD_FAILURE() << "ZERO1 was taken";
  } catch (const RunConfigError& e) {
    EXPECT_STREQ(e.what(), "run config: optimizer.shard is \"ZERO1\"; valid values: none, zero1, auto");
  }
  EXPECT_EQ(c.optimizer.shard, OptimizerSharding::zero1) << "a refused word leaves the key as it was";
  EXPECT_EQ(RunConfig().optimizer.shard, OptimizerSharding::automatic) << "auto unless the config says";
  c.set("optimizer.shard=auto");
  EXPECT_EQ(c.optimizer.shard, OptimizerSharding::automatic);
}

// optimizer.shard = auto: zero1 where several ranks update on CPUs (each would otherwise update every parameter),
// none for one rank or another device; a value the config names is kept as it is, and `why` says what auto chose.
TEST(RunConfig, AutomaticShardingSplitsTheUpdateOnlyWhereSeveralRanksUpdateOnCpus) {
  using joule::trainer::OptimizerSharding;
  using joule::trainer::resolve_sharding;
  const auto automatic = OptimizerSharding::automatic;
  std::string why;
  EXPECT_EQ(resolve_sharding(automatic, 2, true, &why), OptimizerSharding::zero1);
  EXPECT_EQ(why, "2 ranks updating on CPUs: each updates 1/2 of the parameters instead of all of them");
  EXPECT_EQ(resolve_sharding(automatic, 16, true), OptimizerSharding::zero1);
  EXPECT_EQ(resolve_sharding(automatic, 1, true, &why), OptimizerSharding::none);
  EXPECT_EQ(why, "one rank: nothing to split");
  EXPECT_EQ(resolve_sharding(automatic, 8, false, &why), OptimizerSharding::none);
  EXPECT_EQ(why, "not a CPU device: the whole state on every rank");
  for (int world : {1, 2, 16})
    for (bool cpu : {false, true}) {
      EXPECT_EQ(resolve_sharding(OptimizerSharding::none, world, cpu), OptimizerSharding::none);
      EXPECT_EQ(resolve_sharding(OptimizerSharding::zero1, world, cpu), OptimizerSharding::zero1);
    }
}
