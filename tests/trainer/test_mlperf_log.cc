// The MLPerf-style log (trainer/mlperf_log.h): every line a `:::MLLOG` JSON record, the keys the compliance checker's
// BERT rules require exactly once in their order, eval_accuracy with its epoch number, and a resumed segment that
// adds no second run_start. tools/check/mlperf.py runs the real checker on a run's log.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "launch/util/file_io.h"
#include "test_util.h"
#include "trainer/mlperf_log.h"

namespace {

using joule::trainer::MlperfLog;
using joule::trainer::MlperfRunFacts;

std::vector<nlohmann::json> records(const std::string& path) {
  std::vector<nlohmann::json> out;
  const std::string text = joule::read_text_file(path);
  size_t at = 0;
  for (size_t end; (end = text.find('\n', at)) != std::string::npos; at = end + 1) {
    const std::string line = text.substr(at, end - at);
    EXPECT_EQ(line.rfind(":::MLLOG {", 0), 0u) << line;
    out.push_back(nlohmann::json::parse(line.substr(9)));
  }
  return out;
}

MlperfRunFacts facts() {
  MlperfRunFacts f;
  f.org = "joule";
  f.platform = "cpu-host x 1";
  f.global_batch = 32, f.accumulation = 2, f.total_steps = 40, f.warmup_steps = 4, f.seed = 7, f.seq_len = 64;
  f.train_samples = 1000, f.eval_samples = 100;
  f.optimizer = "lamb";
  f.lr = 0.01, f.beta1 = 0.9, f.beta2 = 0.999, f.eps = 1e-6, f.weight_decay = 0.01;
  f.init_start_ms = joule::trainer::epoch_ms() - 1000;
  return f;
}

}  // namespace

TEST(MlperfLog, ARunsRecordsInTheOrderTheCheckerWants) {
  joule::test::TempDir dir;
  const std::string path = dir.path() + "/mllog.txt";
  {
    MlperfLog log(path);
    log.start(facts());
    log.eval(640, 0.25);
  }
  {
    MlperfLog resumed(path);  // a second segment appends: no second init, run_start or block_start
    resumed.eval(1280, 0.5);
    resumed.finish(1280);
  }
  const std::vector<nlohmann::json> r = records(path);
  std::map<std::string, int> count;
  std::vector<std::string> keys;
  for (const auto& j : r) {
    ++count[j["key"].get<std::string>()];
    keys.push_back(j["key"]);
    const std::string key = j["key"], type = j["event_type"];
    const bool start = key.size() > 6 && key.substr(key.size() - 6) == "_start";
    const bool stop = key.size() > 5 && key.substr(key.size() - 5) == "_stop";
    EXPECT_EQ(type, start ? "INTERVAL_START" : stop ? "INTERVAL_END" : "POINT_IN_TIME") << key;
    EXPECT_TRUE(j["time_ms"].is_number_integer() && j["metadata"].is_object()) << j;
  }
  for (const char* once : {"submission_benchmark",
                           "submission_division",
                           "submission_org",
                           "submission_platform",
                           "init_stop",
                           "run_start",
                           "run_stop",
                           "global_batch_size",
                           "opt_base_learning_rate",
                           "opt_lamb_epsilon",
                           "opt_learning_rate_training_steps",
                           "opt_learning_rate_warmup_steps",
                           "num_warmup_steps",
                           "start_warmup_step",
                           "opt_lamb_beta_1",
                           "opt_lamb_beta_2",
                           "opt_lamb_weight_decay_rate",
                           "gradient_accumulation_steps",
                           "train_samples",
                           "eval_samples",
                           "seed"})
    EXPECT_EQ(count[once], 1) << once;
  EXPECT_EQ(count["eval_accuracy"], 2);
  EXPECT_EQ(count["block_start"], count["block_stop"]);
  EXPECT_EQ(keys.front(), "submission_benchmark");
  EXPECT_EQ(keys.back(), "run_stop");
  const auto at = [&](const std::string& k) { return std::find(keys.begin(), keys.end(), k) - keys.begin(); };
  EXPECT_LT(at("init_start"), at("init_stop"));
  EXPECT_LT(at("init_stop"), at("run_start"));
  EXPECT_LT(at("run_start"), at("eval_accuracy"));
  for (const auto& j : r)
    if (j["key"] == "eval_accuracy") EXPECT_TRUE(j["metadata"].contains("epoch_num")) << j;
  EXPECT_EQ(r.back()["metadata"]["status"], "success");
  EXPECT_EQ(r[static_cast<size_t>(at("submission_division"))]["value"], "open");  // not a submission
}
