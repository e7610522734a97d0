#include "trainer/metrics_logger.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "launch/runtime.h"
#include "launch/util/file_io.h"

namespace joule::trainer {
namespace fs = std::filesystem;
namespace {

// A resumed run's history is one history: the records of steps after `last_step` (trained again from the checkpoint)
// and lines that are not JSON records (damaged) are left out of `path`, each said on stdout. Rewrites the file
// (atomically) only when something goes.
void keep_history_until(const std::string& path, int64_t last_step) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec) || fs::file_size(path, ec) == 0) return;
  std::istringstream in(read_text_file(path));
  std::string kept, bad;
  int64_t again = 0, bad_lines = 0, line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) {
      if (++bad_lines <= 5) bad += (bad.empty() ? "" : ", ") + std::to_string(line_no);
      continue;
    }
    if (j["step"].get<int64_t>() > last_step) {
      ++again;
      continue;
    }
    kept += line + "\n";
  }
  if (again == 0 && bad_lines == 0) return;
  write_file_atomically(path, kept);
  if (again > 0)
    std::cout << "note: " << path << ": " << again << " record(s) after step " << last_step
              << " left out (those steps are trained again from the checkpoint)\n";
  if (bad_lines > 0)
    std::cout << "note: " << path << ": line(s) " << bad << (bad_lines > 5 ? ", ..." : "") << " (" << bad_lines
              << " in all) are not JSON records of a step (damaged): left out\n";
}

}  // namespace

MetricsLogger::MetricsLogger(const MetricsSettings& settings, const std::string& run_dir, bool root)
    : s_(settings), root_(root), start_(std::chrono::steady_clock::now()) {
  if (!root_) return;
  const std::string path = (fs::path(run_dir) / "metrics.jsonl").string();
  file_ = LineLog(path);
  if (file_.cut_bytes() > 0)
    std::cout << "note: " << path << " ended in a partial record of " << file_.cut_bytes()
              << " byte(s) (a run killed while writing it): cut back to its last complete line\n";
  file_ = LineLog();  // closed while its records are checked (the file may be replaced), then opened again
  keep_history_until(path, s_.start_step);
  file_ = LineLog(path);
  tb_ = TensorBoardLog((fs::path(run_dir) / "tb").string(), s_.start_step);
  if (tb_.dropped_events() > 0)
    std::cout << "note: " << (fs::path(run_dir) / "tb").string() << ": " << tb_.dropped_events()
              << " TensorBoard event(s) after step " << s_.start_step
              << " left out of the earlier segments' files (those steps are trained again from the checkpoint)\n";
}

double MetricsLogger::wall_s() const { return s_.wall_before + launch::seconds_since(start_); }

double MetricsLogger::seq_per_s(double fallback) const {
  const double seconds = s_.timed_s_before + timed_seconds_;
  return seconds > 0 ? static_cast<double>(s_.timed_sequences_before + timed_sequences_) / seconds : fallback;
}

void MetricsLogger::record_timing(RunAccounting& accounting) const {
  accounting.set_segment_timing(timed_sequences_, timed_seconds_);
}

void MetricsLogger::record_step(const StepRecord& r) {
  last_ = r;
  interval_step_s_ += r.seconds;
  interval_comm_s_ += r.comm_seconds;
  interval_exposed_s_ += r.exposed_comm_seconds;
  interval_comm_bytes_ += r.comm_bytes;
  interval_wait_s_ += r.data_wait_seconds;
  ++interval_steps_;
  interval_sequences_ += r.step_sequences;
  if (r.step - s_.start_step > s_.throughput_warmup_steps) {  // each segment warms up (allocations, caches)
    timed_seconds_ += r.seconds;
    timed_sequences_ += r.step_sequences;
  }
  // On a terminal, rank 0 keeps one live status line between the logged intervals.
  if (root_ && s_.interactive && !interval_ends(r.step)) {
    const double rate = seq_per_s(static_cast<double>(r.step_sequences) / r.seconds);
    std::printf("\r\033[Kstep %lld/%lld | %.2f seq/s | ETA %s", static_cast<long long>(r.step),
                static_cast<long long>(s_.total_steps), rate,
                cost::duration_text(remaining_sequences(r.step) / rate).c_str());
    std::fflush(stdout);
  }
}

void MetricsLogger::write_interval(const StepBoundary& reduced, RunAccounting& accounting, const SimulatedClock* sim) {
  const cost::Segment& segment = accounting.ledger().segments.back();
  const double previous_joules = segment.energy.total(), previous_wall = segment.wall_s;
  accounting.update_segment(reduced.energy, last_.step, last_.sequences, "running");
  record_timing(accounting);
  const cost::Ledger& ledger = accounting.ledger();
  const cost::Spent spent = ledger.totals();
  const double power_w = (segment.energy.total() - previous_joules) / std::max(1e-9, segment.wall_s - previous_wall);
  const BatchSums& sums = reduced.interval;
  const double mlm_loss = sums.mlm_training_loss(), nsp_loss = sums.nsp_training_loss();
  const double mlm_acc = sums.mlm_correct / std::max(1.0, sums.mlm_predictions);
  const double rate = seq_per_s(static_cast<double>(interval_sequences_) / interval_step_s_);
  const double eta = remaining_sequences(last_.step) / rate;
  if (root_) {
    nlohmann::json j = {{"step", last_.step},
                        {"sequences", last_.sequences},
                        {"loss", mlm_loss + nsp_loss},
                        {"mlm_loss", mlm_loss},
                        {"nsp_loss", nsp_loss},
                        {"mlm_acc", mlm_acc},
                        {"lr", last_.lr},
                        {"grad_norm", last_.grad_norm},
                        {"nonfinite_skipped", last_.nonfinite_skipped},
                        {"seq_per_s", rate},
                        {"seq_per_hour", rate * 3600},
                        {"tokens_per_s", rate * s_.seq_len},
                        {"precision", s_.precision},
                        {"mfu", accounting.mfu_json(rate)},
                        {"data_wait_s", interval_wait_s_ / interval_steps_},
                        {"comm_s", interval_comm_s_ / interval_steps_},
                        {"exposed_comm_s", interval_exposed_s_ / interval_steps_},
                        {"comm_bytes", interval_comm_bytes_ / interval_steps_},
                        {"step_s", interval_step_s_ / interval_steps_},
                        {"wall_s", wall_s()},
                        {"power_w", power_w},
                        {"it_kwh", spent.it_kwh},
                        {"energy_kwh", spent.facility_kwh},
                        {"cost_usd", spent.usd},
                        {"co2_kg", spent.co2_kg},
                        {"energy_source", cost::energy_json(ledger.energy())["source"]}};
    if (sim) j["sim"] = sim->figures(last_.step).to_json();
    // After a warm-up fraction of the target, project the whole run from the measured rates.
    if (s_.timed_s_before + timed_seconds_ > 0 && last_.sequences >= s_.project_after_fraction * s_.target_sequences) {
      const cost::Projection p =
          cost::project_target(s_.target_sequences, last_.sequences, ledger.wall_s(), spent, rate);
      accounting.ledger().add_projection(
          {last_.step, last_.sequences, ledger.wall_s(), p.wall_s, p.kwh, p.usd, p.co2_kg});
      j["projection"] = {
          {"sequences", p.sequences}, {"wall_s", p.wall_s}, {"kwh", p.kwh}, {"usd", p.usd}, {"co2_kg", p.co2_kg}};
    }
    file_.write_line(j.dump());
    Scalars tb = {{"train/loss", mlm_loss + nsp_loss},
                  {"train/mlm_loss", mlm_loss},
                  {"train/nsp_loss", nsp_loss},
                  {"train/mlm_accuracy", mlm_acc},
                  {"train/learning_rate", last_.lr},
                  {"train/grad_norm", last_.grad_norm},
                  {"perf/seq_per_s", rate},
                  {"energy/power_w", power_w},
                  {"energy/facility_kwh", spent.facility_kwh},
                  {"cost/usd", spent.usd},
                  {"co2/kg", spent.co2_kg}};
    if (!j["mfu"].is_null()) tb.push_back({"perf/mfu", j["mfu"].get<double>()});
    tb_.scalars(last_.step, tb);
    // Written whole, then renamed: a scraper never sees half a file.
    if (!s_.prometheus_file.empty()) write_file_atomically(s_.prometheus_file, cost::prometheus_text(j, ledger.run_id));
    char line[320];
    std::snprintf(line, sizeof line,
                  "step %lld/%lld | %lld seq | loss %.4f | mlm_acc %.3f | lr %.2e | %.2f seq/s | ETA %s\n",
                  static_cast<long long>(last_.step), static_cast<long long>(s_.total_steps),
                  static_cast<long long>(last_.sequences), mlm_loss + nsp_loss, mlm_acc, last_.lr, rate,
                  cost::duration_text(eta).c_str());
    std::cout << (s_.interactive ? "\r\033[K" : "") << line << std::flush;
  }
  interval_step_s_ = interval_comm_s_ = interval_exposed_s_ = interval_wait_s_ = interval_comm_bytes_ = 0;
  interval_steps_ = interval_sequences_ = 0;
}

double MetricsLogger::remaining_sequences(int64_t step) const {
  return static_cast<double>((s_.total_steps - step) * s_.global_batch) * s_.sequences_per_row;
}

void MetricsLogger::write_eval(int64_t step, int64_t sequences, const EvalResult& eval) {
  if (!root_) return;
  file_.write_line(
      nlohmann::json({{"step", step}, {"sequences", sequences}, {"wall_s", wall_s()}, {"eval", eval.to_json()}})
          .dump());
  tb_.scalars(step, {{"eval/loss", eval.loss},
                     {"eval/mlm_loss", eval.mlm_loss},
                     {"eval/nsp_loss", eval.nsp_loss},
                     {"eval/mlm_accuracy", eval.mlm_accuracy},
                     {"eval/nsp_accuracy", eval.nsp_accuracy}});
  std::printf("eval at step %lld: mlm_acc %.4f, nsp_acc %.4f, loss %.4f (%lld sequences)\n",
              static_cast<long long>(step), eval.mlm_accuracy, eval.nsp_accuracy, eval.loss,
              static_cast<long long>(eval.sequences));
  std::fflush(stdout);
}

}  // namespace joule::trainer
