#include <gtest/gtest.h>

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
    EXPECT_EQ(c.optimizer, "lamb");
  }
  RunConfig p1 = RunConfig::from_toml_file(std::string(JOULE_TEST_FIXTURES) + "/../../configs/bert-large-phase1.toml");
  EXPECT_EQ(p1.global_batch, 65536);
  EXPECT_DOUBLE_EQ(p1.lr, 6e-3);
  EXPECT_DOUBLE_EQ(p1.warmup_fraction, 0.2843);
  EXPECT_EQ(p1.steps, 7038);
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
  e = error_of("[train]\ndevice = \"cuda\"\n");
  EXPECT_NE(e.find("valid values: cpu, trainium-sim"), std::string::npos) << e;
  e = error_of("[sim]\nnodes = 0\n");
  EXPECT_NE(e.find("sim.nodes must be >= 1"), std::string::npos) << e;
  e = error_of("[accounting]\npue = 0.5\n");
  EXPECT_NE(e.find("accounting.pue must be >= 1"), std::string::npos) << e;
  e = error_of("[accounting]\nprice_per_hour = \"cheap\"\n");
  EXPECT_NE(e.find("'accounting.price_per_hour' must be a number"), std::string::npos) << e;
}

TEST(RunConfig, SetOverridesByTypeAndRoundTrips) {
  RunConfig c;
  c.set("optimizer.lr=4e-3");
  c.set("train.target_sequences=450e6");
  c.set("data.train=/data/phase1");
  EXPECT_DOUBLE_EQ(c.lr, 4e-3);
  EXPECT_EQ(c.target_sequences, 450000000);
  EXPECT_EQ(c.train_data, "/data/phase1");
  EXPECT_THROW(c.set("train.steps=1.5"), RunConfigError);
  EXPECT_THROW(c.set("optimizer.lr=fast"), RunConfigError);
  EXPECT_THROW(c.set("optimizer.lrr=1"), RunConfigError);
  EXPECT_THROW(c.set("no-equals"), RunConfigError);
  RunConfig back = RunConfig::from_toml_text(c.to_toml(), "resolved");
  EXPECT_EQ(back.to_toml(), c.to_toml());
  EXPECT_DOUBLE_EQ(back.lr, 4e-3);
  EXPECT_EQ(back.target_sequences, 450000000);
}
