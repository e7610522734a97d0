// joule serve's parts without HTTP or a model: the dynamic batcher (on a fake classifier), the Open Inference
// Protocol's requests and responses, the metrics' text, and bench serve's arrivals and its reading of that text.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <future>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "launch/util/error.h"
#include "tools/serve/batcher.h"
#include "tools/serve/load.h"
#include "tools/serve/metrics.h"
#include "tools/serve/oip.h"

namespace {

using joule::serve::Batcher;
using joule::serve::BatcherOptions;
using joule::serve::Classifier;
using joule::serve::Example;
using joule::serve::Outcome;
using nlohmann::json;
using namespace std::chrono_literals;

Example example(int64_t tokens, int64_t tag) {
  Example e;
  e.ids.assign(static_cast<size_t>(tokens), 1);
  e.line = tag;
  return e;
}

// A fake classifier: records each batch's tags and answers {"tag": line}; waits for `gate` while it is closed.
struct Fake {
  std::mutex mutex;
  std::vector<std::vector<int64_t>> batches;
  std::atomic<bool> open{true};
  std::atomic<bool> fail_next{false};
  Batcher::Run run() {
    return [this](const std::vector<const Example*>& batch) {
      while (!open) std::this_thread::sleep_for(1ms);
      if (fail_next.exchange(false)) throw std::runtime_error("the forward pass ran out of memory");
      Classifier::Results r;
      std::vector<int64_t> tags;
      for (const Example* e : batch) {
        tags.push_back(e->line);
        r.objects.push_back({{"tag", e->line}});
        r.tokens += static_cast<int64_t>(e->ids.size());
      }
      std::lock_guard<std::mutex> lock(mutex);
      batches.push_back(tags);
      return r;
    };
  }
};

std::vector<Example> one(int64_t tokens, int64_t tag) { return {example(tokens, tag)}; }

TEST(ServeBatcher, ABatchClosesWhenFullWithoutWaitingForTheDelay) {
  Fake fake;
  Batcher b({4, 30.0, 64}, fake.run());
  std::vector<std::future<Outcome>> f;
  const auto start = std::chrono::steady_clock::now();
  for (int k = 0; k < 4; ++k) f.push_back(b.submit(one(10, k)));
  for (auto& x : f) EXPECT_TRUE(x.get().error.empty());
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);  // not the 30 s delay
  ASSERT_EQ(fake.batches.size(), 1u);
  EXPECT_EQ(fake.batches[0].size(), 4u);
}

TEST(ServeBatcher, WithoutAThreadOfItsOwnTheBatchesRunOnTheThreadThatCallsWorkUntilDrain) {
  Fake fake;
  std::thread::id ran_on;
  Batcher::Run run = fake.run();
  Batcher b({2, 0.0, 64, /*own_thread=*/false}, [&](const std::vector<const Example*>& batch) {
    ran_on = std::this_thread::get_id();
    return run(batch);
  });
  std::future<Outcome> first = b.submit(one(3, 1)), second = b.submit(one(3, 2));
  std::thread server([&] {
    EXPECT_EQ(first.get().objects.at(0)["tag"], 1);
    EXPECT_EQ(second.get().objects.at(0)["tag"], 2);
    b.drain();  // work() returns
  });
  b.work();
  server.join();
  EXPECT_EQ(ran_on, std::this_thread::get_id());
  EXPECT_THROW(b.submit(one(3, 3)), joule::serve::QueueFull);
}

TEST(ServeBatcher, ALoneRequestRunsAfterTheDelay) {
  Fake fake;
  Batcher b({8, 0.05, 64}, fake.run());
  const auto start = std::chrono::steady_clock::now();
  Outcome o = b.submit(one(5, 7)).get();
  EXPECT_GE(std::chrono::steady_clock::now() - start, 45ms);
  ASSERT_EQ(o.objects.size(), 1u);
  EXPECT_EQ(o.objects[0]["tag"], 7);
  EXPECT_EQ(o.batch_examples, 1);
  EXPECT_GE(o.queue_seconds, 0.045);
}

TEST(ServeBatcher, TheOldestRequestTakesTheNearestLengthsWholeAndEachGetsItsOwnResults) {
  Fake fake;
  fake.open = false;  // the first batch holds the worker while the queue fills
  Batcher b({4, 0.0, 64}, fake.run());
  auto first = b.submit(one(50, 100));
  while (b.queued() != 0) std::this_thread::sleep_for(1ms);
  // Oldest: 20 tokens; then 500 (far), a pair of 22 and 25 (near, whole), 19 (near), 300.
  auto a = b.submit(one(20, 0));
  auto far = b.submit(one(500, 1));
  auto pair = b.submit({example(22, 2), example(25, 3)});
  auto near = b.submit(one(19, 4));
  auto other = b.submit(one(300, 5));
  fake.open = true;
  first.get();
  const Outcome p = pair.get();
  ASSERT_EQ(p.objects.size(), 2u);
  EXPECT_EQ(p.objects[0]["tag"], 2);
  EXPECT_EQ(p.objects[1]["tag"], 3);
  EXPECT_EQ(a.get().objects[0]["tag"], 0);
  near.get();
  far.get();
  other.get();
  ASSERT_EQ(fake.batches.size(), 3u);
  EXPECT_EQ(fake.batches[1], (std::vector<int64_t>{0, 2, 3, 4}));  // 20 with the pair and 19 (in queue order), not 500
  EXPECT_EQ(fake.batches[2], (std::vector<int64_t>{1, 5}));
}

TEST(ServeBatcher, AFullQueueRefusesAndDrainAnswersEverythingTaken) {
  Fake fake;
  fake.open = false;
  Batcher b({2, 0.0, 4}, fake.run());
  std::vector<std::future<Outcome>> f;
  f.push_back(b.submit(one(3, 0)));
  while (b.queued() != 0) std::this_thread::sleep_for(1ms);  // running, held
  f.push_back(b.submit({example(3, 1), example(3, 2)}));
  f.push_back(b.submit({example(3, 3), example(3, 4)}));
  EXPECT_EQ(b.queued(), 4);
  EXPECT_THROW(b.submit(one(3, 5)), joule::serve::QueueFull);
  EXPECT_THROW(b.submit({}), std::invalid_argument);
  EXPECT_THROW(b.submit({example(1, 0), example(1, 1), example(1, 2)}), std::invalid_argument);  // above max_batch
  std::thread opener([&] {
    std::this_thread::sleep_for(20ms);
    fake.open = true;
  });
  b.drain();
  opener.join();
  for (auto& x : f) EXPECT_TRUE(x.get().error.empty());
  EXPECT_THROW(b.submit(one(3, 6)), joule::serve::QueueFull);  // after the drain
}

TEST(ServeBatcher, AFailedBatchAnswersItsRequestsWithTheErrorAndTheNextBatchRuns) {
  Fake fake;
  Batcher b({1, 0.0, 8}, fake.run());
  fake.fail_next = true;
  const Outcome failed = b.submit(one(3, 0)).get();
  EXPECT_NE(failed.error.find("out of memory"), std::string::npos);
  EXPECT_TRUE(failed.objects.empty());
  const Outcome next = b.submit(one(3, 1)).get();
  EXPECT_TRUE(next.error.empty());
  EXPECT_EQ(next.objects[0]["tag"], 1);
}

TEST(ServeBatcher, ManyThreadsSubmittingGetExactlyTheirOwnAnswers) {
  Fake fake;
  Batcher b({8, 0.001, 1024}, fake.run());
  std::vector<std::thread> threads;
  std::atomic<int> wrong{0};
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&, t] {
      for (int k = 0; k < 50; ++k) {
        const int64_t tag = t * 1000 + k;
        const Outcome o = b.submit({example(1 + (tag % 13), tag), example(2, tag + 500)}).get();
        if (o.objects.size() != 2 || o.objects[0]["tag"] != tag || o.objects[1]["tag"] != tag + 500) ++wrong;
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(wrong, 0);
  size_t examples = 0;
  for (const auto& batch : fake.batches) {
    EXPECT_LE(batch.size(), 8u);
    examples += batch.size();
  }
  EXPECT_EQ(examples, 8u * 50u * 2u);
}

const joule::serve::ModelShape kText{"m", "BertForSequenceClassification", false, false, 4};
const joule::serve::ModelShape kLayout{"doc", "LayoutLMForTokenClassification", true, true, 4};

json text_request(json data, json shape) {
  return {{"inputs", {{{"name", "text"}, {"datatype", "BYTES"}, {"shape", shape}, {"data", data}}}}};
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const joule::serve::BadRequest& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(ServeProtocol, TextInputsBecomeOneExampleEachFlatOrNested) {
  auto e = joule::serve::request_examples(text_request({"a", "b"}, {2}), kText);
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[1], json({{"text", "b"}}));
  e = joule::serve::request_examples(text_request({{"a"}, {"b"}}, {2, 1}), kText);
  EXPECT_EQ(e[0], json({{"text", "a"}}));
  json pair = text_request({"q1", "q2"}, {2});
  pair["inputs"].push_back({{"name", "text_pair"}, {"datatype", "BYTES"}, {"shape", {2}}, {"data", {"p1", "p2"}}});
  e = joule::serve::request_examples(pair, kText);
  EXPECT_EQ(e[1], json({{"text", "q2"}, {"text_pair", "p2"}}));
}

TEST(ServeProtocol, EachBadRequestNamesTheInputAndWhatIsWrong) {
  using joule::serve::request_examples;
  auto expect = [](const json& body, const std::string& words) {
    const std::string what = error_of([&] { request_examples(body, kText); });
    EXPECT_NE(what.find(words), std::string::npos) << body.dump() << " -> " << what;
  };
  expect(json::array(), "must be a JSON object");
  expect(json::object(), "no \"inputs\" list");
  expect(text_request({"a", "b", "c"}, {2}), "shape [2] holds 2 elements, \"data\" has 3");
  expect(text_request({"a"}, {-1}), "sizes must be integers");
  expect(text_request({1}, {1}), "element 0 must be a string");
  expect(text_request({"a", "b", "c", "d", "e"}, {5}), "holds 5 examples; this server takes at most 4");
  expect(text_request(json::array(), {0}), "holds no example");
  expect(text_request({"a", "b"}, {1, 2}), "must have shape [N] or [N, 1]");
  json typo = text_request({"a"}, {1});
  typo["inputs"][0]["name"] = "txt";
  expect(typo, "input 'txt' is not one of m's: 'text', 'text_pair'");
  json twice = text_request({"a"}, {1});
  twice["inputs"].push_back(twice["inputs"][0]);
  expect(twice, "input 'text' is given twice");
  json type = text_request({"a"}, {1});
  type["inputs"][0]["datatype"] = "FP32";
  expect(type, "input 'text' must be BYTES, found datatype 'FP32'");
  expect(text_request({{{{"a"}}}}, {1}), "nested deeper than 3 dimensions");
  json huge = text_request({"a"}, {16777216, 16777216});
  expect(huge, "too large");
}

TEST(ServeProtocol, ALayoutDocumentIsOneExampleWithItsBoxesAndPage) {
  json body = {{"inputs",
                {{{"name", "words"}, {"datatype", "BYTES"}, {"shape", {1, 2}}, {"data", {"Invoice", "42"}}},
                 {{"name", "boxes"}, {"datatype", "INT64"}, {"shape", {2, 4}}, {"data", {1, 2, 3, 4, 5, 6, 7, 8}}},
                 {{"name", "page"}, {"datatype", "FP32"}, {"shape", {2}}, {"data", {100.5, 200}}}}}};
  const auto e = joule::serve::request_examples(body, kLayout);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0]["words"], json({"Invoice", "42"}));
  EXPECT_EQ(e[0]["boxes"], json({{1, 2, 3, 4}, {5, 6, 7, 8}}));
  EXPECT_EQ(e[0]["page"], json({100.5, 200}));
  body["inputs"][1]["shape"] = {1, 8};
  EXPECT_NE(error_of([&] { joule::serve::request_examples(body, kLayout); }).find("input 'boxes' must have shape"),
            std::string::npos);
  body["inputs"][1]["shape"] = {2, 4};
  body["inputs"][1]["data"][3] = 4.5;
  EXPECT_NE(error_of([&] { joule::serve::request_examples(body, kLayout); }).find("is not an integer"),
            std::string::npos);
}

std::string le32(uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); }

TEST(ServeProtocol, BinaryTensorDataIsReadIntoTheInputsData) {
  const std::string header = json{{"inputs",
                                   {{{"name", "text"},
                                     {"datatype", "BYTES"},
                                     {"shape", {2}},
                                     {"parameters", {{"binary_data_size", 4 + 5 + 4 + 2}}}}}}}
                                 .dump();
  const std::string body = header + le32(5) + "hello" + le32(2) + "yo";
  const json r = joule::serve::parse_request(body, std::to_string(header.size()));
  EXPECT_EQ(r["inputs"][0]["data"], json({"hello", "yo"}));
  EXPECT_EQ(joule::serve::request_examples(r, kText)[1], json({{"text", "yo"}}));
  auto bad = [&](const std::string& b, const std::string& length, const std::string& words) {
    const std::string what = error_of([&] { joule::serve::parse_request(b, length); });
    EXPECT_NE(what.find(words), std::string::npos) << what;
  };
  bad(body, "", "not JSON");  // binary bytes after the JSON without the header
  bad(body, "99999", "is not a byte count");
  bad(header + le32(5) + "hello" + le32(9) + "yo", std::to_string(header.size()), "runs past");
  bad(header + le32(5) + "hello" + le32(2) + "yo!", std::to_string(header.size()), "follow the JSON");
  bad(header + le32(5) +
          "hel\xff"
          "o" +
          le32(2) + "yo",
      std::to_string(header.size()), "UTF-8");
  bad(header + le32(5) + "hello" + le32(2), std::to_string(header.size()), "runs past");
  bad("{\"inputs\": [", "", "not JSON");
}

TEST(ServeProtocol, ResponsesHoldTheRequestedOutputsWithShapesAndPadding) {
  const std::vector<json> seq = {{{"line", 0}, {"label", "pos"}, {"score", 0.75}},
                                 {{"line", 1}, {"label", "neg"}, {"score", 0.5}, {"truncated", true}}};
  json body = text_request({"a", "b"}, {2});
  body["id"] = "r-7";
  json r = joule::serve::response(body, kText, seq);
  EXPECT_EQ(r["id"], "r-7");
  EXPECT_EQ(r["model_name"], "m");
  ASSERT_EQ(r["outputs"].size(), 3u);
  EXPECT_EQ(r["outputs"][0],
            json({{"name", "label"}, {"datatype", "BYTES"}, {"shape", {2}}, {"data", {"pos", "neg"}}}));
  EXPECT_EQ(r["outputs"][2]["data"], json({false, true}));
  body["outputs"] = {{{"name", "score"}}};
  r = joule::serve::response(body, kText, seq);
  ASSERT_EQ(r["outputs"].size(), 1u);
  EXPECT_EQ(r["outputs"][0]["data"], json({0.75, 0.5}));
  body["outputs"] = {{{"name", "logits"}}};
  EXPECT_NE(error_of([&] { joule::serve::requested_outputs(body, kText); }).find("output 'logits' is not one of"),
            std::string::npos);
  const std::vector<json> words = {{{"labels", {"B", nullptr, "I"}}, {"scores", {0.5, nullptr, 0.25}}}};
  r = joule::serve::response(json::object(), kLayout, words);
  EXPECT_EQ(r["outputs"][0],
            json({{"name", "labels"}, {"datatype", "BYTES"}, {"shape", {1, 3}}, {"data", {"B", "", "I"}}}));
  EXPECT_EQ(r["outputs"][1]["data"], json({0.5, 0, 0.25}));
}

TEST(ServeMetrics, TheTextIsPrometheusWithCumulativeBuckets) {
  joule::serve::Metrics m;
  m.request(200, "");
  m.request(400, "bad_request");
  m.answered(3, 0.002, 0.04, 0.05);
  m.batch(3, 30, 40);
  const std::string t = m.text(5, {{"cpu", "model", 12.5}});
  for (const char* line :
       {"joule_requests_total{code=\"200\"} 1", "joule_request_errors_total{kind=\"bad_request\"} 1",
        "joule_inferences_total 3", "joule_queue_seconds_bucket{le=\"0.001\"} 0",
        "joule_queue_seconds_bucket{le=\"0.0025\"} 1", "joule_queue_seconds_bucket{le=\"+Inf\"} 1",
        "joule_compute_seconds_bucket{le=\"0.05\"} 1", "joule_batch_examples_bucket{le=\"4\"} 1",
        "joule_queue_examples 5", "joule_padded_tokens_total 40",
        "joule_energy_joules_total{component=\"cpu\",source=\"model\"} 12.5", "# TYPE joule_request_seconds histogram"})
    EXPECT_NE(t.find(std::string(line) + "\n"), std::string::npos) << line << "\n" << t;
}

TEST(ServeMetrics, BenchServeReadsTheSeriesAndWhatIsServedBack) {
  joule::serve::Metrics m;
  m.describe({{"model", "seq"}, {"precision", "bf16"}, {"max_batch", "8"}});
  m.batch(3, 30, 40);
  m.batch(5, 50, 50);
  const auto read = joule::serve::parse_metrics(m.text(0, {{"cpu", "model", 2.5}, {"ram", "model", 0.5}}));
  EXPECT_EQ(joule::serve::metric_sum(read, "joule_batch_examples_count"), 2);
  EXPECT_EQ(joule::serve::metric_sum(read, "joule_batch_examples_sum"), 8);
  EXPECT_EQ(joule::serve::metric_sum(read, "joule_energy_joules_total"), 3);
  EXPECT_EQ(joule::serve::metric_sum(read, "joule_batch_examples"), 0) << "a name is whole, not a prefix";
  const auto info = joule::serve::metric_labels(read, "joule_model_info");
  EXPECT_EQ(info.at("model"), "seq");
  EXPECT_EQ(info.at("precision"), "bf16");
  EXPECT_EQ(info.at("max_batch"), "8");
  EXPECT_TRUE(joule::serve::metric_labels(read, "joule_nothing").empty());
  EXPECT_EQ(joule::serve::series_labels(R"(x{a="1",b="say \"hi\""})").at("b"), R"(say \"hi\")");
}

TEST(ServeLoad, PoissonArrivalsComeAtTheRateWithExponentialGapsAndRepeatWithTheSeed) {
  const std::vector<double> at = joule::serve::poisson_arrivals(200, 50, 7);
  ASSERT_FALSE(at.empty());
  // 10,000 expected; the count of a Poisson process has standard deviation 100.
  EXPECT_NEAR(static_cast<double>(at.size()), 10000, 400);
  EXPECT_TRUE(std::is_sorted(at.begin(), at.end()));
  EXPECT_LT(at.back(), 50);
  // Exponential gaps: mean 1/rate and as many above the mean as e^-1 of them.
  double sum = 0;
  int above = 0;
  for (size_t k = 1; k < at.size(); ++k) {
    const double gap = at[k] - at[k - 1];
    sum += gap;
    above += gap > 1.0 / 200;
  }
  EXPECT_NEAR(sum / static_cast<double>(at.size() - 1), 0.005, 0.0003);
  EXPECT_NEAR(static_cast<double>(above) / static_cast<double>(at.size() - 1), std::exp(-1.0), 0.02);
  EXPECT_EQ(joule::serve::poisson_arrivals(200, 50, 7), at);
  EXPECT_NE(joule::serve::poisson_arrivals(200, 50, 8), at);
}

TEST(ServeLoad, AUrlIsHttpHostAndPortAndNothingElse) {
  const auto e = joule::serve::parse_url("http://127.0.0.1:8000/");
  EXPECT_EQ(e.host, "127.0.0.1");
  EXPECT_EQ(e.port, 8000);
  EXPECT_EQ(joule::serve::parse_url("http://[::1]:9").host, "::1");
  for (const char* bad : {"127.0.0.1:8000", "https://127.0.0.1:8000", "http://127.0.0.1", "http://h:0",
                          "http://h:70000", "http://h:80/v2", "http://h :80"})
    EXPECT_THROW(joule::serve::parse_url(bad), joule::UsageError) << bad;
}

}  // namespace
