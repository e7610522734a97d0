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
    if (j["key"] == "eval_accuracy") {
      EXPECT_TRUE(j["metadata"].contains("epoch_num")) << j;
    }
  EXPECT_EQ(r.back()["metadata"]["status"], "success");
  EXPECT_EQ(r[static_cast<size_t>(at("submission_division"))]["value"], "open");  // not a submission
}

// A resume drops what it trains again: a crash after the checkpoint left evals past it, and a finished run continued
// with --steps raised left its closing block_stop and run_stop. The log ends with one run_stop and counts no sample
// twice.
TEST(MlperfLog, AResumeDropsTheLinesItTrainsAgain) {
  joule::test::TempDir dir;
  const std::string path = dir.path() + "/mllog.txt";
  const auto keys_and_counts = [&] {
    std::vector<std::pair<std::string, int64_t>> out;
    for (const auto& j : records(path)) out.emplace_back(j["key"], j["metadata"].value("samples_count", int64_t{-1}));
    return out;
  };
  {
    MlperfLog log(path);
    log.start(facts());
    log.eval(100, 0.1);
    log.eval(200, 0.2);
    log.eval(300, 0.3);  // the crash comes after this eval; the newest checkpoint is at 200 samples
  }
  const size_t before_crash = records(path).size();
  {
    MlperfLog resumed(path, 200);
    EXPECT_EQ(resumed.dropped_lines(), 5);  // the eval at 300: block_stop, eval_start/accuracy/stop, block_start
    EXPECT_EQ(records(path).size(), before_crash - 5);
    resumed.eval(300, 0.31);
    resumed.finish(400);
  }
  {
    MlperfLog continued(path, 400);           // the finished run continued from its last checkpoint
    EXPECT_EQ(continued.dropped_lines(), 2);  // block_stop and run_stop at 400
    continued.eval(500, 0.5);
    continued.finish(600);
  }
  {
    MlperfLog unchanged(path, 600);  // a finished log resumed at its own end (then finished again) drops its close
    EXPECT_EQ(unchanged.dropped_lines(), 2);
    unchanged.finish(600);
  }
  int run_stops = 0, evals_at_300 = 0;
  int64_t last_count = 0;
  for (const auto& [key, count] : keys_and_counts()) {
    run_stops += key == "run_stop";
    evals_at_300 += key == "eval_accuracy" && count == 300;
    if (count >= 0) {
      EXPECT_GE(count, last_count) << key;  // samples never go back
      last_count = count;
    }
  }
  EXPECT_EQ(run_stops, 1);
  EXPECT_EQ(evals_at_300, 1);
  EXPECT_EQ(keys_and_counts().back(), (std::pair<std::string, int64_t>{"run_stop", 600}));
  // A partial last line (a writer killed mid-line) stays for LineLog to cut, and the lines before it are kept.
  joule::write_file_atomically(path, joule::read_text_file(path) + ":::MLLOG {\"key\": \"eval_st");
  MlperfLog torn(path, 550);
  EXPECT_EQ(torn.dropped_lines(), 2);  // 600's block_stop and run_stop; the eval at 500 and its new block stay
  EXPECT_EQ(keys_and_counts().back(), (std::pair<std::string, int64_t>{"block_start", 500}));
}
