#include "trainer/mlperf_log.h"

#include <chrono>
#include <filesystem>
#include <utility>
#include <vector>

namespace joule::trainer {
namespace fs = std::filesystem;

double epoch_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::system_clock::now().time_since_epoch()).count();
}

namespace {

// The log's complete lines without those a resume from `samples` trains again; a partial last line (a writer killed
// mid-line) is kept as it is, for LineLog to cut. Returns how many lines went.
int64_t drop_lines_after(const std::string& path, int64_t samples) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return 0;
  const std::string text = read_text_file(path);
  std::vector<std::pair<std::string, std::string>> kept;  // each line and its key ("" for a line that is not a record)
  int64_t dropped = 0;
  size_t begin = 0;
  for (size_t end; (end = text.find('\n', begin)) != std::string::npos; begin = end + 1) {
    const std::string line = text.substr(begin, end - begin);
    nlohmann::json j;
    if (line.rfind(":::MLLOG ", 0) == 0) j = nlohmann::json::parse(line.substr(9), nullptr, false);
    const std::string key = j.is_object() ? j.value("key", "") : "";
    const nlohmann::json metadata = j.is_object() ? j.value("metadata", nlohmann::json::object()) : nlohmann::json();
    const nlohmann::json count = metadata.is_object() ? metadata.value("samples_count", nlohmann::json()) : nullptr;
    if (count.is_number_integer() && count.get<int64_t>() > samples) {
      ++dropped;
    } else if (key == "run_stop") {  // the run goes on: no run_stop, nor the block_stop written with it
      ++dropped;
      if (!kept.empty() && kept.back().second == "block_stop") kept.pop_back(), ++dropped;
    } else {
      kept.emplace_back(line, key);
    }
  }
  if (dropped == 0) return 0;
  std::string out;
  for (const auto& [line, key] : kept) out += line + "\n";
  out += text.substr(begin);  // a partial last line, if any
  write_file_atomically(path, out);
  return dropped;
}

}  // namespace

MlperfLog::MlperfLog(const std::string& path, int64_t resume_samples)
    : dropped_lines_(resume_samples >= 0 ? drop_lines_after(path, resume_samples) : 0) {
  file_ = LineLog(path);
}

std::string MlperfLog::line(const std::string& key, const nlohmann::json& value, const nlohmann::json& metadata,
                            double time_ms) {
  const auto ends_with = [&](const char* tail) {
    const std::string t = tail;
    return key.size() > t.size() && key.compare(key.size() - t.size(), t.size(), t) == 0;
  };
  const char* type = ends_with("_start") ? "INTERVAL_START" : ends_with("_stop") ? "INTERVAL_END" : "POINT_IN_TIME";
  nlohmann::json meta = metadata;
  meta["file"] = "joule";
  meta["lineno"] = 0;
  const nlohmann::json j = {{"namespace", ""},    {"time_ms", static_cast<int64_t>(time_ms)},
                            {"event_type", type}, {"key", key},
                            {"value", value},     {"metadata", meta}};
  return ":::MLLOG " + j.dump();
}

void MlperfLog::log(const std::string& key, const nlohmann::json& value, const nlohmann::json& metadata,
                    double time_ms) {
  if (!file_.is_open()) return;
  file_.write_line(line(key, value, metadata, time_ms > 0 ? time_ms : epoch_ms()));
}

void MlperfLog::start(const MlperfRunFacts& f) {
  log("submission_benchmark", "bert");
  log("submission_division", "open");
  log("submission_org", f.org);
  log("submission_platform", f.platform);
  log("submission_status", "research");
  log("cache_clear", true);
  log("init_start", nullptr, nlohmann::json::object(), f.init_start_ms);
  log("global_batch_size", f.global_batch);
  log("gradient_accumulation_steps", f.accumulation);
  log("max_sequence_length", f.seq_len);
  log("seed", f.seed);
  log("opt_base_learning_rate", f.lr);
  log("opt_learning_rate_training_steps", f.total_steps);
  log("opt_learning_rate_warmup_steps", f.warmup_steps);
  log("num_warmup_steps", f.warmup_steps);
  log("start_warmup_step", 0);
  const std::string o = f.optimizer == "lamb" ? "opt_lamb_" : "opt_adamw_";
  log(o + "beta_1", f.beta1);
  log(o + "beta_2", f.beta2);
  log(o + "epsilon", f.eps);
  log(o + "weight_decay_rate", f.weight_decay);
  log("train_samples", f.train_samples);
  log("eval_samples", f.eval_samples);
  log("init_stop");
  log("run_start");
  log("block_start", nullptr, {{"first_epoch_num", 0}, {"epoch_count", 1}, {"samples_count", 0}});
}

void MlperfLog::eval(int64_t samples, double mlm_accuracy) {
  // BERT's reference numbers its "epochs" by the samples trained so far.
  log("block_stop", nullptr, {{"first_epoch_num", samples}, {"samples_count", samples}});
  log("eval_start", nullptr, {{"epoch_num", samples}, {"samples_count", samples}});
  log("eval_accuracy", mlm_accuracy, {{"epoch_num", samples}, {"samples_count", samples}});
  log("eval_stop", nullptr, {{"epoch_num", samples}, {"samples_count", samples}});
  log("block_start", nullptr, {{"first_epoch_num", samples}, {"epoch_count", 1}, {"samples_count", samples}});
}

void MlperfLog::finish(int64_t samples, const std::string& status) {
  log("block_stop", nullptr, {{"first_epoch_num", samples}, {"samples_count", samples}});
  log("run_stop", nullptr, {{"status", status}, {"samples_count", samples}});
}

}  // namespace joule::trainer
