#include "trainer/trainer.h"

#include <sys/resource.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <utility>

#include "data/loader.h"
#include "launch/placement.h"
#include "launch/runtime.h"
#include "launch/torch_compat.h"
#include "launch/util/file_io.h"
#include "launch/util/format.h"
#include "launch/util/hash.h"
#include "models/flops.h"
#include "models/model_dir.h"
#include "trainer/cost/run_summary.h"
#include "trainer/data_record.h"
#include "trainer/loss_spike.h"
#include "trainer/metrics_logger.h"
#include "trainer/mlperf_log.h"
#include "trainer/run_accounting.h"
#include "trainer/run_lock.h"
#include "trainer/run_setup.h"
#include "trainer/sim_clock.h"
#include "trainer/summary_writer.h"
#include "trainer/train_step.h"

namespace joule::trainer {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using launch::seconds_since;

namespace {

// The FLOPs of training on one of the data set's sequences, the basis of MFU: a row's FLOPs in the share its real
// tokens hold (padding is not useful work, packed or not), and the MLM head's for the sequence's masked predictions.
double data_flops_per_sequence(const models::BertConfig& config, const data::Dataset& d) {
  const double sequences = static_cast<double>(d.sequences());
  const double encoder = models::training_flops_per_sequence(config, d.seq_len(), 0);
  const double per_prediction = models::training_flops_per_sequence(config, d.seq_len(), 1) - encoder;
  return encoder * static_cast<double>(d.real_tokens()) / (sequences * static_cast<double>(d.seq_len())) +
         per_prediction * static_cast<double>(d.masked_predictions()) / sequences;
}

void print_on_root(bool root, const std::string& text) {
  if (root) std::cout << text << std::flush;
}

// Every rank must train the same run: the hash of its resolved config and of the data set it indexed are compared
// with rank 0's, and every rank stops with the same error on a mismatch (an MPMD launch with another flag, a node
// that sees other files).
void check_ranks_agree_on_the_run(const ResolvedRun& run, collectives::Communicator& comm) {
  const std::string config = run.config_hash, data = run.dataset().digest();
  std::string root_config = config, root_data = data;
  collectives::broadcast_string(comm, root_config, 0, run.cfg.train.collective_timeout_seconds,
                                "the run's config hash");
  collectives::broadcast_string(comm, root_data, 0, run.cfg.train.collective_timeout_seconds, "the run's data hash");
  std::vector<double> differs = {config != root_config ? 1.0 : 0.0, data != root_data ? 1.0 : 0.0};
  collectives::sum_over_ranks(comm, differs, run.cfg.train.collective_timeout_seconds, "run agreement");
  if (differs[0] + differs[1] == 0) return;
  throw RunConfigError(
      std::to_string(static_cast<int>(differs[0])) + " rank(s) resolved another config than rank 0 and " +
          std::to_string(static_cast<int>(differs[1])) + " rank(s) indexed another data set (this rank: config " +
          config + ", data " + data + "; rank 0: config " + root_config + ", data " + root_data +
          "); replicas of one run must agree",
      "give every rank the same command line, config file and data (one mpirun command, not MPMD; the same files "
      "on every node)");
}

// Non-finite weights are never written: not to a checkpoint, not to final/.
void refuse_nonfinite_weights(const Optimizer& optimizer, const std::string& what) {
  const double norm = optimizer.parameter_norm();
  if (!std::isfinite(norm))
    throw NonFiniteError("the parameters are NaN/Inf (norm " + std::to_string(norm) + "): the " + what +
                         " is not written");
}

// Rank 0 takes RUN/.joule.lock before anything in RUN is written (trainer/run_lock.h) and checks that one checkpoint
// fits (weights and two moments in fp32); an error ends every rank.
RunLock lock_run_directory(const ResolvedRun& run, collectives::Communicator& comm) {
  RunLock lock;
  if (comm.info().rank == 0) {
    std::string previous;
    lock = RunLock::acquire(run.cfg.run.dir, &previous);
    if (!previous.empty()) std::cout << "note: " << previous << "\n" << std::flush;
    const auto parameters = static_cast<double>(models::parameter_counts(run.model_config).total());
    const double one_checkpoint = checkpoint_bytes(parameters);
    struct statvfs fsinfo {};
    if (::statvfs(run.cfg.run.dir.c_str(), &fsinfo) == 0) {
      const double available = static_cast<double>(fsinfo.f_bavail) * static_cast<double>(fsinfo.f_frsize);
      if (available < one_checkpoint)
        throw joule::IoError(run.cfg.run.dir + ": " + std::to_string(available / (1 << 20)) +
                                 " MiB free, one checkpoint needs " + std::to_string(one_checkpoint / (1 << 20)) +
                                 " MiB (weights and two optimizer moments in fp32)",
                             write_failure_hint(ENOSPC));
    }
  }
  comm.barrier(
      {collectives::ReduceOp::kSum, run.cfg.train.collective_timeout_seconds, "rank 0 locking the run directory"});
  return lock;
}

// After the resume checks: RUN/config.toml (every key, the automatic ones as used), RUN/model_config.json and the
// few lines rank 0 prints of them: what a user checks before the first step.
void write_run_directory(const ResolvedRun& run, const collectives::ProcessGroupInfo& info, int threads) {
  const RunConfig& cfg = run.cfg;
  if (info.rank != 0) return;
  const std::string config_file = (fs::path(cfg.run.dir) / "config.toml").string();
  write_file_atomically(config_file, used_config_toml(cfg, run.used));
  write_file_atomically((fs::path(cfg.run.dir) / "model_config.json").string(), run.model_config.to_json_text());
  const models::BertConfig& m = run.model_config;
  const auto parameters = static_cast<double>(models::parameter_counts(m).total());
  const std::string count = parameters < 1e9 ? format_number("%.3gM", parameters / 1e6)  // 0.693M, 335M
                                             : format_number("%.3gB", parameters / 1e9);
  std::cout << "joule train: " << cfg.model.config << " (" << m.num_hidden_layers << " layers, hidden " << m.hidden_size
            << ", " << count << " parameters); " << run.total_steps << " steps; " << run.world << " rank(s) on "
            << info.node_count << " node(s), " << threads << " thread(s) per rank, device " << run.device.description
            << "\n"
            << "batch: global batch " << run.global_batch << " = " << cfg.train.micro_batch << " x "
            << cfg.train.accumulation << " x " << run.world << " (micro-batch x accumulation x ranks), sequences of "
            << cfg.train.seq_len << " tokens\n"
            << "data: training " << cfg.data.train << " (" << run.dataset().shards().size() << " shard(s), "
            << (run.dataset().pack() > 0 ? std::to_string(run.dataset().size()) + " packed rows holding " +
                                               std::to_string(run.dataset().sequences()) + " sequences"
                                         : std::to_string(run.dataset().size()) + " sequences")
            << ", shuffled in " << run.dataset().block_layout().order_name() << "), eval "
            << (run.eval_set ? cfg.data.eval + " (" + std::to_string(run.eval_set->shards().size()) + " shard(s), " +
                                   std::to_string(run.eval_set->sequences()) + " sequences)"
                             : std::string("none"))
            << "\n"
            << run.precision.reason << "\n"
            << (cfg.train.device == launch::DeviceKind::cuda ? std::string() : "gemm: " + run.gemm.line() + "\n")
            << "run: " << cfg.run.dir << " (its config.toml has every key; automatic ones with their source)\n"
            << std::flush;
}

void print_accounting(RunAccounting& accounting, const collectives::ProcessGroupInfo& info, const SimulatedClock* sim) {
  if (info.rank != 0) return;
  if (sim) std::cout << sim->start_line();
  const cost::CostSettings& cost = accounting.cost();
  std::cout << "accounting: " << cost.instance << " x " << info.node_count << " node(s), USD " << cost.usd_per_hour
            << "/h (" << cost.price_source << "), PUE " << cost.pue << ", " << cost.region.g_per_kwh << " g CO2/kWh ("
            << cost.grid_source << ")\nenergy meters: " << accounting.meters().sources() << "\n";
  for (const auto& n : accounting.meters().notices()) std::cout << "note: " << n << "\n";
  std::cout << std::flush;
}

MetricsSettings metrics_settings(const ResolvedRun& run, const TrainerState& state, const cost::Ledger& ledger) {
  const RunConfig& cfg = run.cfg;
  MetricsSettings m;
  m.log_every_steps = cfg.train.log_every_steps;
  m.throughput_warmup_steps = cfg.train.throughput_warmup_steps;
  m.total_steps = run.total_steps;
  m.global_batch = run.global_batch;
  m.seq_len = cfg.train.seq_len;
  m.precision = models::precision_name(run.precision.precision);
  m.target_sequences = run.target_sequences;
  m.sequences_per_row = static_cast<double>(run.dataset().sequences()) / static_cast<double>(run.dataset().size());
  m.project_after_fraction = cfg.accounting.project_after_fraction;
  m.prometheus_file = cfg.accounting.prometheus_file;
  // A live status line only for a single process on a terminal: under mpirun/srun every rank gets a
  // pseudo-terminal whatever the real destination.
  const bool launched = launch::detect_placement().launcher != "none";
  m.interactive = cfg.train.progress == ProgressMode::bar || (cfg.train.progress == ProgressMode::automatic &&
                                                              run.world == 1 && !launched && isatty(STDOUT_FILENO));
  m.start_step = state.step;
  m.wall_before = state.wall_seconds;
  for (size_t i = 0; i + 1 < ledger.segments.size(); ++i) {  // the earlier segments (the last one is this)
    m.timed_sequences_before += ledger.segments[i].timed_sequences;
    m.timed_s_before += ledger.segments[i].timed_s;
  }
  return m;
}

// Everything the loop works with, built by train() from the stages.
struct LoopParts {
  double init_start_ms;  // when `train` began (MLPerf's init_start)
  const ResolvedRun& run;
  TrainingStack& objects;
  collectives::Communicator& comm;
  const FaultPoints& faults;
  RunAccounting& accounting;
  const SimulatedClock* sim;
  TrainerState& state;
};

class TrainingLoop {
 public:
  explicit TrainingLoop(LoopParts p)
      : p_(p),
        cfg_(p.run.cfg),
        root_(p.comm.info().rank == 0),
        loader_(p.run.dataset(), sampler_config(), p.state.sampler, loader_options()),
        metrics_(metrics_settings(p.run, p.state, p.accounting.ledger()), cfg_.run.dir, root_),
        policy_(cfg_.checkpoint, root_),
        step_(p.objects.model, *p.objects.reducer, *p.objects.optimizer, p.comm, cfg_.train.collective_timeout_seconds,
              cfg_.train.accumulation) {
    // A resumed run's target outcome so far (its last eval may have been its last step), for the same target only.
    if (!p.state.target_json.empty() && cfg_.eval.target_mlm_accuracy > 0) {
      const cost::TargetAccuracy saved =
          cost::TargetAccuracy::from_json(nlohmann::json::parse(p.state.target_json), "trainer_state.json");
      if (saved.target == cfg_.eval.target_mlm_accuracy) target_ = saved;
    }
    if (!root_) return;
    const std::string mllog = (fs::path(cfg_.run.dir) / "mllog.txt").string();
    const bool resumed = p.state.segments > 1;
    mllog_ = MlperfLog(mllog, resumed ? p.state.sequences : -1);
    if (!resumed) mllog_.start(mlperf_facts());  // a resumed run's log goes on where it stopped
    if (mllog_.dropped_lines() > 0)
      std::cout << "note: " << mllog << ": " << mllog_.dropped_lines()
                << " line(s) left out that this segment writes again "
                << "(what followed the checkpoint at " << p.state.sequences << " samples, or a finished run's close)\n";
  }

  // Steps until the run's target, the target accuracy or a preemption. Returns the exit code.
  int run() {
    while (p_.state.step < p_.run.total_steps) {
      StepRecord record = run_step();
      const bool log = metrics_.interval_ends(record.step);
      if (log) check_parameters_finite(record);  // one read of the weights per logging interval
      const bool eval = eval_due(record.step);
      StepBoundary boundary = local_boundary(record, log, eval);
      boundary.reduce(p_.comm, cfg_.train.collective_timeout_seconds);
      check_ranks_agree(boundary, record.step);
      // The step's sequences, every rank's: global_batch unless the rows are packed.
      record.step_sequences = std::llround(boundary.sequences);
      p_.state.sequences += record.step_sequences;
      record.sequences = p_.state.sequences;
      record.loss = boundary.loss / p_.run.world;
      watch_loss(record);
      metrics_.record_step(record);
      if (log) metrics_.write_interval(boundary, p_.accounting, p_.sim);
      if (eval) finish_eval_at(record.step, boundary.eval);
      const CheckpointPolicy::Decision d = policy_.decide(record.step, boundary);
      // With checkpoints on, the run's last step is saved too: a finished run continued with more --steps resumes
      // where it ended instead of training its last steps again from an earlier checkpoint.
      const bool last = record.step == p_.run.total_steps || reached_target();
      // A run that reached its target is finished, even when a preemption came at that step.
      const bool preempted = d.preempted && !reached_target();
      if (d.save || (last && (cfg_.checkpoint.every_steps > 0 || cfg_.checkpoint.every_minutes > 0)))
        checkpoint(preempted);
      if (preempted) return kExitPreempted;
      if (reached_target()) break;
    }
    return 0;
  }

  const MetricsLogger& metrics() const { return metrics_; }
  // run_stop's status: MLPerf's "aborted" when a target accuracy was set and not reached.
  void log_finished() { mllog_.finish(p_.state.sequences, target_ && !target_->reached ? "aborted" : "success"); }
  const std::optional<EvalResult>& last_eval() const { return last_eval_; }
  bool reached_target() const { return target_ && target_->reached; }
  const std::optional<cost::TargetAccuracy>& target_accuracy() const { return target_; }

 private:
  data::SamplerConfig sampler_config() const {
    return {p_.run.dataset().block_layout(),
            static_cast<uint64_t>(p_.run.global_batch),
            static_cast<uint64_t>(cfg_.train.micro_batch),
            p_.run.world,
            p_.comm.info().rank,
            static_cast<uint64_t>(cfg_.train.seed)};
  }

  // A step takes all its micro-batches before its first forward (it counts their predictions: trainer/train_step.h),
  // so the loader keeps a whole step ready, read while the previous step computes.
  data::LoaderOptions loader_options() const {
    data::LoaderOptions o;
    o.prefetch = static_cast<int>(std::max<int64_t>(o.prefetch, cfg_.train.accumulation + 1));
    return o;
  }

  // One optimizer step, with the fault points around it; advances the state.
  StepRecord run_step() {
    TrainerState& state = p_.state;
    const auto t0 = Clock::now();
    p_.faults.before_step(state.step + 1);
    const double wait_before = loader_.wait_seconds();
    StepOptions options;
    options.poison_loss = p_.faults.poisons_loss(state.step + 1);
    const double lr = learning_rate(cfg_.optimizer.lr, p_.objects.optimizer->steps(), p_.run.total_steps,
                                    cfg_.optimizer.warmup_fraction);
    const StepResult result = step_.run([&] { return loader_.next(); }, lr, options);
    ++state.step;
    state.sampler = loader_.state();
    count_nonfinite(result);
    p_.faults.after_update(state.step, [&] {
      for (const auto& shard : p_.run.dataset().shards()) corrupt_file(shard.path);
      loader_.reopen_shards();
    });
    StepRecord r;
    r.step = state.step;
    r.step_sequences = result.sequences;  // this rank's, until the step boundary sums the ranks'
    r.nonfinite_skipped = state.nonfinite_skipped;
    r.skipped = result.skipped;
    if (!result.skipped) {
      interval_sums_.add(result.sums);            // a NaN/Inf step's sums stay out of the interval
      const BatchSums step = result.sums.read();  // the step's loss (the gradient norm has synchronized already)
      r.loss = step.training_loss();
    }
    r.lr = lr;
    r.grad_norm = result.grad_norm;
    r.seconds = seconds_since(t0);
    r.comm_seconds = result.comm_seconds;
    r.exposed_comm_seconds = result.exposed_comm_seconds;
    r.comm_bytes = result.comm_bytes;
    r.data_wait_seconds = loader_.wait_seconds() - wait_before;
    return r;
  }

  // Finite gradients, yet an update may write NaN/Inf (an absurd optimizer setting, an overflow): the weights are lost
  // from there on. Checked at every logging interval (and before every checkpoint and final/, which never receive
  // non-finite weights): the run stops with the step and the newest checkpoint.
  void check_parameters_finite(const StepRecord& record) {
    const double norm = p_.objects.optimizer->parameter_norm();
    if (std::isfinite(norm)) return;
    const auto latest = find_latest_checkpoint(checkpoint_root(), nullptr);
    throw NonFiniteError(
        "step " + std::to_string(record.step) + ": the parameters are NaN/Inf after the update (learning rate " +
        std::to_string(record.lr) +
        "), so the run stops without saving them. Newest checkpoint: " + (latest ? *latest : std::string("none")));
  }

  // A loss above train.loss_spike_factor x its running mean is logged (skipped steps have none).
  void watch_loss(const StepRecord& record) {
    if (record.skipped) return;
    if (const std::optional<double> mean = loss_spikes_.observe(record.loss))
      print_on_root(
          root_, "warning: step " + std::to_string(record.step) +
                     ": loss spike: " + format_number("%.4g", record.loss) + " is " +
                     format_number("%.2f", record.loss / *mean) + "x its running mean " + format_number("%.4g", *mean) +
                     " (train.loss_spike_factor = " + format_number("%g", cfg_.train.loss_spike_factor) + ")\n");
  }

  // "shards/part-0.hdf5 rows 32..47, ..." for a step's rows.
  std::string rows_text(const std::vector<data::RowRun>& rows) const {
    std::string text;
    for (const data::RowRun& run : rows)
      text += (text.empty() ? "" : ", ") + p_.run.dataset().shards()[run.block.shard].path + " rows " +
              std::to_string(run.row) + ".." + std::to_string(run.row + run.count - 1);
    return text;
  }

  // The NaN/Inf policy: a skipped update is counted; train.max_nonfinite_steps in a row stop the run. Every rank
  // whose own loss was NaN/Inf names its rows (on stderr: each rank has its own).
  void count_nonfinite(const StepResult& result) {
    TrainerState& state = p_.state;
    if (!result.skipped) {
      state.nonfinite_streak = 0;
      return;
    }
    ++state.nonfinite_skipped;
    ++state.nonfinite_streak;
    print_on_root(root_, "warning: step " + std::to_string(state.step) + ": gradient norm " +
                             std::to_string(result.grad_norm) + " (NaN/Inf in loss or gradients); update skipped (" +
                             std::to_string(state.nonfinite_streak) + " in a row, " +
                             std::to_string(state.nonfinite_skipped) + " in the run)\n");
    // One write: std::cerr is unbuffered, and the other ranks write to the same stream (a line written in pieces
    // came out with rank 0's warning in its middle).
    if (result.nonfinite_batches > 0)
      std::cerr << ("warning: step " + std::to_string(state.step) + ", rank " + std::to_string(p_.comm.info().rank) +
                    ": NaN/Inf loss in " + std::to_string(result.nonfinite_batches) + " micro-batch(es), rows: " +
                    (result.nonfinite_rows.empty() ? std::string("not known") : rows_text(result.nonfinite_rows)) +
                    "\n")
                << std::flush;
    if (state.nonfinite_streak < cfg_.train.max_nonfinite_steps) return;
    const auto latest = find_latest_checkpoint(checkpoint_root(), nullptr);
    throw NonFiniteError(
        "steps " + std::to_string(state.step - state.nonfinite_streak + 1) + ".." + std::to_string(state.step) +
        ": NaN/Inf gradients in " + std::to_string(state.nonfinite_streak) +
        " consecutive steps (train.max_nonfinite_steps = " + std::to_string(cfg_.train.max_nonfinite_steps) +
        "), so the run stops. Newest checkpoint: " + (latest ? *latest : std::string("none")));
  }

  bool eval_due(int64_t step) const {
    return p_.run.eval_set && cfg_.eval.every_steps > 0 &&
           (step % cfg_.eval.every_steps == 0 || step == p_.run.total_steps);
  }

  // This rank's values for the boundary after `record`'s step (eval runs here, when due).
  StepBoundary local_boundary(const StepRecord& record, bool log, bool eval) {
    StepBoundary b;
    b.skipped = record.skipped ? 1.0 : 0.0;
    b.sequences = static_cast<double>(record.step_sequences);
    b.loss = record.loss;
    if (log)
      b.interval = std::exchange(interval_sums_, DeviceSums{}).read();  // the interval's one read from the device
    if (eval)
      b.eval = evaluate_slice(p_.objects.model, *p_.run.eval_set, cfg_.eval.batch, cfg_.eval.max_batches,
                              p_.comm.info().rank, p_.run.world);
    if (log) b.energy = p_.accounting.local_energy();  // meters are read when the interval's figures need them
    policy_.vote(record.step, p_.faults, b);
    return b;
  }

  // The reduced gradients (hence the skip) are the same on every rank; anything else is a bug.
  void check_ranks_agree(const StepBoundary& b, int64_t step) const {
    if (b.skipped != 0 && b.skipped != p_.run.world)
      throw joule::InternalError("step " + std::to_string(step) + ": " + std::to_string(static_cast<int>(b.skipped)) +
                                 " of " + std::to_string(p_.run.world) +
                                 " ranks found NaN/Inf gradients; the replicas have diverged");
  }

  MlperfRunFacts mlperf_facts() const {
    const OptimizerOptions& o = cfg_.optimizer;
    MlperfRunFacts f;
    f.org = cfg_.accounting.project_name;
    f.platform = p_.accounting.cost().instance + " x " + std::to_string(p_.comm.info().node_count) + " (" +
                 std::to_string(p_.run.world) + " ranks, " + p_.run.device.description + ")";
    f.global_batch = p_.run.global_batch;
    f.accumulation = cfg_.train.accumulation;
    f.total_steps = p_.run.total_steps;
    f.warmup_steps = static_cast<int64_t>(std::llround(o.warmup_fraction * static_cast<double>(p_.run.total_steps)));
    f.seed = cfg_.train.seed;
    f.seq_len = cfg_.train.seq_len;
    f.train_samples = p_.run.dataset().sequences();
    f.eval_samples = p_.run.eval_set ? p_.run.eval_set->size() : 0;
    f.optimizer = kOptimizerWords.at(static_cast<size_t>(o.name));
    f.lr = o.lr, f.beta1 = o.beta1, f.beta2 = o.beta2, f.eps = o.eps, f.weight_decay = o.weight_decay;
    f.init_start_ms = p_.init_start_ms;
    return f;
  }

  void finish_eval_at(int64_t step, const BatchSums& reduced) {
    last_eval_ = finish_eval(reduced);
    metrics_.write_eval(step, p_.state.sequences, *last_eval_);
    mllog_.eval(p_.state.sequences, last_eval_->mlm_accuracy);
    if (cfg_.eval.target_mlm_accuracy <= 0) return;
    // MLPerf's time to train: the first eval at or above the target, else the latest.
    target_ = cost::TargetAccuracy{cfg_.eval.target_mlm_accuracy,
                                   last_eval_->mlm_accuracy,
                                   last_eval_->mlm_accuracy >= cfg_.eval.target_mlm_accuracy,
                                   step,
                                   p_.state.sequences,
                                   metrics_.wall_s()};
    p_.state.target_json = target_->to_json().dump();  // checkpoints keep it
    if (target_->reached)
      print_on_root(root_, "reached the target masked-LM accuracy " + format_number("%g", target_->target) +
                               " at step " + std::to_string(step) + " (" + std::to_string(p_.state.sequences) +
                               " sequences)\n");
  }

  std::string checkpoint_root() const { return (fs::path(cfg_.run.dir) / "checkpoints").string(); }

  void checkpoint(bool preempted) {
    TrainerState& state = p_.state;
    p_.objects.reducer->hold_fp32_weights();  // ZeRO-1's bf16 weights whole in fp32 (the next step casts them back)
    refuse_nonfinite_weights(*p_.objects.optimizer, "checkpoint of step " + std::to_string(state.step));
    state.wall_seconds = metrics_.wall_s();
    const cost::EnergyTotals energy =
        reduce_energy(p_.accounting.local_energy(), p_.comm, cfg_.train.collective_timeout_seconds);
    p_.accounting.update_segment(energy, state.step, state.sequences, preempted ? "preempted" : "running");
    metrics_.record_timing(p_.accounting);
    state.ledger_json = p_.accounting.ledger().to_json().dump();
    const auto t = Clock::now();
    CheckpointFaults faults;
    faults.after_stage = [&](const std::string& stage) { p_.faults.checkpoint_stage(state.step, stage); };
    faults.fail_fsync = p_.faults.fails_fsync(state.step);
    const std::string dir = save_checkpoint(checkpoint_root(), p_.objects.model, *p_.objects.optimizer, state, p_.comm,
                                            cfg_.checkpoint.keep, cfg_.train.collective_timeout_seconds, faults);
    policy_.saved();
    print_on_root(root_, "checkpoint " + dir + " (" + cost::duration_text(seconds_since(t)) + ")\n");
    if (preempted)
      print_on_root(root_, "preempted (signal): checkpoint saved; exiting with code " + std::to_string(kExitPreempted) +
                               " for requeue + --resume auto\n");
  }

  LoopParts p_;
  const RunConfig& cfg_;
  bool root_;
  MlperfLog mllog_;  // rank 0: RUN/mllog.txt
  data::Loader loader_;
  MetricsLogger metrics_;
  CheckpointPolicy policy_;
  TrainStep step_;
  DeviceSums interval_sums_;  // this rank's sums since the last logging interval, on the device
  LossSpikeWatch loss_spikes_{cfg_.train.loss_spike_factor};
  std::optional<EvalResult> last_eval_;
  std::optional<cost::TargetAccuracy> target_;  // with eval.target_mlm_accuracy set, from the first eval on
};

// --device trainium-sim: the simulated cluster's clock (its buckets: the reducer's plan for a bf16 run of this model).
SimulatedClock simulated_clock(const ResolvedRun& run, const std::string& config_dir, double grid) {
  sim::Workload per_device;
  per_device.model = run.model_config;
  per_device.seq_len = run.cfg.train.seq_len;
  per_device.max_predictions = run.dataset().max_predictions();
  per_device.micro_batch = run.cfg.train.micro_batch;
  // Rows of several sequences: their mean, and the predictions a row holds on average (not its slots).
  if (const data::Dataset& d = run.dataset(); d.pack() > 0) {
    per_device.sequences_per_row = static_cast<double>(d.sequences()) / static_cast<double>(d.size());
    per_device.max_predictions = (d.masked_predictions() + d.size() - 1) / d.size();
  }
  per_device.sequences = static_cast<double>(run.cfg.accounting.project_sequences);
  per_device.zero1 = run.shard == OptimizerSharding::zero1;
  return SimulatedClock(run.cfg.sim, per_device, run.cfg.train.accumulation, config_dir, grid);
}

// Every rank's peak memory and optimizer state, gathered for the summary (collective).
cost::MemoryFigures memory_figures(const ResolvedRun& run, const TrainingStack& objects,
                                   collectives::Communicator& comm) {
  const auto& info = comm.info();
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  const double device_peak =
      run.device.device.is_cuda()
          ? static_cast<double>(launch::compat::cuda_peak_allocated_bytes(run.device.cuda_index()))
          : 0.0;
  constexpr size_t kFields = 3;
  std::vector<double> per_rank(static_cast<size_t>(info.world_size) * kFields, 0.0);
  const size_t mine = static_cast<size_t>(info.rank) * kFields;
  per_rank[mine] = static_cast<double>(ru.ru_maxrss) * 1024.0;
  per_rank[mine + 1] = objects.optimizer->state_bytes();
  per_rank[mine + 2] = device_peak;
  collectives::sum_over_ranks(comm, per_rank, run.cfg.train.collective_timeout_seconds, "memory figures");
  cost::MemoryFigures m;
  m.optimizer_shard = sharding_name(run.shard);
  m.peak_rss_bytes_min = per_rank[0];
  for (size_t r = 0; r < static_cast<size_t>(info.world_size); ++r) {
    m.peak_rss_bytes_max = std::max(m.peak_rss_bytes_max, per_rank[r * kFields]);
    m.peak_rss_bytes_min = std::min(m.peak_rss_bytes_min, per_rank[r * kFields]);
    m.optimizer_state_bytes_per_rank = std::max(m.optimizer_state_bytes_per_rank, per_rank[r * kFields + 1]);
    m.peak_device_bytes_max = std::max(m.peak_device_bytes_max, per_rank[r * kFields + 2]);
  }
  return m;
}

// The end of the run: RUN/final (finished runs), the ledger's last update and the training-cost summary.
void finish_run(const ResolvedRun& run, TrainingLoop& loop, int exit_code, TrainingStack& objects, TrainerState& state,
                RunAccounting& accounting, const SimulatedClock* sim, collectives::Communicator& comm) {
  const RunConfig& cfg = run.cfg;
  const bool root = comm.info().rank == 0;
  state.wall_seconds = loop.metrics().wall_s();
  if (exit_code == 0) objects.reducer->hold_fp32_weights();  // collective: ZeRO-1's bf16 weights whole in fp32
  if (exit_code == 0) refuse_nonfinite_weights(*objects.optimizer, "final weights");
  if (exit_code == 0) {
    if (root) models::save_model_dir(objects.model, (fs::path(cfg.run.dir) / "final").string());
    const auto parameters = static_cast<double>(models::parameter_counts(run.model_config).total());
    comm.barrier({collectives::ReduceOp::kSum,
                  checkpoint_wait_seconds(cfg.train.collective_timeout_seconds, parameters * 4),
                  "rank 0 writing the final weights"});
  }
  if (exit_code == 0) loop.log_finished();
  const cost::EnergyTotals energy =
      reduce_energy(accounting.local_energy(), comm, cfg.train.collective_timeout_seconds);
  const bool preempted = exit_code == kExitPreempted;
  accounting.update_segment(energy, state.step, state.sequences, preempted ? "preempted" : "finished");
  loop.metrics().record_timing(accounting);
  const cost::MemoryFigures memory = memory_figures(run, objects, comm);
  if (!root) return;
  RunOutcome o;
  o.memory = memory;
  o.steps = state.step;
  o.sequences = state.sequences;
  o.segments = state.segments;
  o.data_notes = data_segment_notes(state.data_json);
  o.nonfinite_skipped = state.nonfinite_skipped;
  o.wall_s = state.wall_seconds;
  o.seq_per_s = loop.metrics().seq_per_s(state.sequences / state.wall_seconds);
  o.preempted = preempted;
  o.reached_target = loop.reached_target();
  o.target_accuracy = loop.target_accuracy();
  o.eval = loop.last_eval();
  o.model = cfg.model.config;
  o.seq_len = cfg.train.seq_len;
  o.project_sequences = cfg.accounting.project_sequences;
  o.max_predictions = run.dataset().max_predictions();
  o.global_batch = run.global_batch;
  o.target_sequences = run.target_sequences;
  o.flops_per_sequence = data_flops_per_sequence(run.model_config, run.dataset());
  o.pack = run.dataset().pack();
  o.packing_efficiency = run.dataset().packing_efficiency();
  o.dtype = models::precision_name(run.precision.precision);
  if (run.cfg.train.device != launch::DeviceKind::cuda) o.gemm = gemm_record(run.gemm);
  write_summary(cfg.run.dir, o, comm.info(), accounting, sim);
}

// The step at which RUN/summary.json says the run finished (its final/ written), or -1: rank 0 reads, every rank
// learns.
int64_t finished_at(const std::string& run_dir, collectives::Communicator& comm) {
  std::string step = "-1";
  if (comm.info().rank == 0) {
    std::error_code ec;
    const fs::path summary = fs::path(run_dir) / "summary.json";
    if (fs::is_directory(fs::path(run_dir) / "final", ec) && fs::is_regular_file(summary, ec)) try {
        const cost::RunSummary finished = cost::read_run_summary(run_dir);
        if (finished.status.rfind("finished", 0) == 0) step = std::to_string(finished.steps);
      } catch (const std::exception&) {
        // unreadable: not known to be finished, so the resume goes on (and rewrites it)
      }
  }
  collectives::broadcast_string(comm, step, 0, 600, "where the run finished");
  return std::stoll(step);
}

}  // namespace

int train(const TrainRequest& request) {
  const double init_start_ms = epoch_ms();
  RunConfig cfg = request.config;
  cfg.validate();
  FaultPlan fault_plan = FaultPlan::from_environment();  // developers' fault injection (trainer/fault.h)
  CheckpointPolicy::install_signal_handlers();
  TrainingProcess process = start_training_process(cfg.train);
  collectives::Communicator& comm = *process.comm;
  const auto& info = comm.info();
  fault_plan.check_ranks(info.world_size);
  const FaultPoints faults(std::move(fault_plan), info.rank);
  faults.announce();
  const std::string config_dir =
      request.config_dir.empty() ? fs::path(request.presets_dir).parent_path().string() : request.config_dir;
  // The meters run from here: start-up is billed.
  RunAccounting accounting(cfg.accounting, launch::device_name(cfg.train.device), config_dir, info,
                           process.device.cuda_index(), process.device.pci_bus_id);

  ResolvedRun run = resolve_run(cfg, request.presets_dir, process, accounting.cost(), request.eval_from_data_root);
  check_ranks_agree_on_the_run(run, comm);
  const RunLock lock = lock_run_directory(run, comm);  // held to the end: one job per run directory
  const StartPoint start = choose_start(run.cfg.run.dir, request.resume, comm, faults);
  keep_the_checkpoints_fp32_gemm(run, start, comm);
  TrainingStack objects = build_training(training_spec(run), comm);
  TrainerState state = start_state(run, start, objects, comm, request.accept_data_change);
  // A finished run resumed: nothing to do at its own length (no segment added, nothing written); a longer one (--steps
  // raised) continues it, said with both ends. A run stopped after its last checkpoint but before final/ and its
  // summary still resumes, to write them.
  if (const int64_t finished = start.checkpoint ? finished_at(run.cfg.run.dir, comm) : -1; finished >= 0) {
    const std::string run_dir = run.cfg.run.dir;
    if (run.total_steps <= finished) {
      if (info.rank == 0)
        std::cout << run_dir << ": the run finished at step " << finished << " (" << run_dir
                  << "/summary.json); nothing to do, nothing written. To train it further, raise --steps "
                     "(train.steps) or train.target_sequences\n"
                  << std::flush;
      comm.barrier({collectives::ReduceOp::kSum, run.cfg.train.collective_timeout_seconds, "the end of the run"});
      return 0;
    }
    if (info.rank == 0)
      std::cout << "continuing the finished run " << run_dir << " from step " << state.step << " to step "
                << run.total_steps
                << (state.step < finished ? " (its newest checkpoint is before the step it finished at, " +
                                                std::to_string(finished) + ": those steps are trained again)"
                                          : std::string())
                << "\n"
                << std::flush;
  }
  write_run_directory(run, info, process.threads);  // nothing is written before the resume checks have passed

  accounting.begin_segment(state.ledger_json, state.step, state.sequences, run.cfg.accounting.project_name);
  accounting.set_mfu_basis(data_flops_per_sequence(run.model_config, run.dataset()),
                           models::precision_name(run.precision.precision));
  std::optional<SimulatedClock> sim;
  if (run.cfg.train.device == launch::DeviceKind::trainium_sim)
    sim.emplace(simulated_clock(run, config_dir, accounting.cost().region.g_per_kwh));
  print_accounting(accounting, info, sim ? &*sim : nullptr);

  TrainingLoop loop({init_start_ms, run, objects, comm, faults, accounting, sim ? &*sim : nullptr, state});
  const int exit_code = loop.run();
  finish_run(run, loop, exit_code, objects, state, accounting, sim ? &*sim : nullptr, comm);
  comm.barrier({collectives::ReduceOp::kSum, run.cfg.train.collective_timeout_seconds, "rank 0 writing the summary"});
  return exit_code;
}

std::string export_checkpoint(const std::string& checkpoint_or_run, const std::string& out_dir) {
  // As typed: relative, or with a trailing slash (the run directory is found from the checkpoint's path).
  fs::path given = fs::absolute(checkpoint_or_run).lexically_normal();
  if (given.filename().empty()) given = given.parent_path();
  std::string dir = given.string();
  std::error_code ec;
  const std::string what_to_give = "give a checkpoint directory (RUN/checkpoints/step_NNNNNNNN) or a run directory";
  if (!fs::is_directory(dir, ec))
    throw CheckpointError(checkpoint_or_run + (fs::exists(dir, ec) ? ": not a directory" : ": no such directory"),
                          what_to_give);
  if (fs::exists(fs::path(dir) / "manifest.json", ec)) {
    // What is exported is verified as a resume verifies it: complete, every file of its size and checksum.
    if (const std::string problem = verify_checkpoint(dir); !problem.empty())
      throw CheckpointError(checkpoint_or_run + ": " + problem + "; not exported",
                            "export another checkpoint, or give the run directory: joule export takes its newest "
                            "checkpoint that verifies");
  } else {
    std::vector<std::string> warnings;
    auto latest = find_latest_checkpoint((fs::path(dir) / "checkpoints").string(), &warnings);
    for (const auto& w : warnings) std::cerr << "warning: " << w << "\n";
    if (!latest)
      throw CheckpointError(
          checkpoint_or_run + ": neither a checkpoint nor a run directory with a complete checkpoint",
          what_to_give + " holding one; a finished run's final/ is already a model directory (no export needed)");
    dir = *latest;
  }
  // The config travels in the run directory; rebuild it from the checkpoint's run config.
  const fs::path run = fs::path(dir).parent_path().parent_path();
  const fs::path final_config = run / "final" / "config.json";
  models::BertConfig config;
  if (fs::exists(run / "model_config.json"))
    config = models::BertConfig::from_json_file((run / "model_config.json").string());
  else if (fs::exists(final_config))
    config = models::BertConfig::from_json_file(final_config.string());
  else
    throw CheckpointError(dir + ": no model_config.json in the run directory " + run.string());
  models::BertForPreTraining model(config);
  models::load_weights(model, (fs::path(dir) / "model.safetensors").string());
  StagedDirectory staged(out_dir);  // swapped in whole: an interrupted export leaves no half model
  staged.fill([&](const std::string& to) { models::save_model_dir(model, to); });
  staged.commit();
  return dir;
}

}  // namespace joule::trainer
