#include "trainer/trainer.h"

#include <unistd.h>

#include <csignal>
#include <cstdlib>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sys/utsname.h>
#include <limits>
#include <optional>
#include <thread>

#include <nlohmann/json.hpp>

#include "collectives/reducer.h"
#include "data/dataset.h"
#include "data/loader.h"
#include "data/tokenizer.h"
#include "launch/cpu_allocator.h"
#include "launch/placement.h"
#include "launch/runtime.h"
#include "models/model_dir.h"
#include "models/flops.h"
#include "trainer/accounting.h"
#include "trainer/checkpoint.h"
#include "trainer/fault.h"
#include "trainer/optimizer.h"
#include "trainer/perf_model.h"

namespace joule::trainer {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using collectives::sum_over_ranks;

namespace {

std::atomic<int> g_signal{0};
extern "C" void on_preempt_signal(int sig) { g_signal.store(sig); }

using launch::seconds_since;

std::vector<double> energy_vector(const EnergyTotals& e) { return {e.joules.begin(), e.joules.end()}; }
EnergyTotals energy_from(const std::vector<double>& v, size_t offset) {
  EnergyTotals e;
  for (size_t i = 0; i < e.joules.size(); ++i) e.joules[i] = v[offset + i];
  return e;
}

// What emissions.csv says about a node: OS, CPU model, vCPUs, memory, devices.
nlohmann::json host_json(const InstanceProfile& p) {
  utsname u{};
  uname(&u);
  std::string cpu_model;
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);)
    if (line.rfind("model name", 0) == 0) {
      cpu_model = line.substr(line.find(':') + 2);
      break;
    }
  return {{"os", std::string(u.sysname) + "-" + u.release}, {"cpu_model", cpu_model}, {"vcpus", p.vcpus},
          {"memory_gib", p.memory_gib}, {"devices", p.devices}, {"device_model", p.devices ? p.device_model : ""}};
}

struct Counts {
  double mlm_loss = 0, nsp_loss = 0, mlm_correct = 0, mlm_predictions = 0, nsp_correct = 0, sequences = 0, batches = 0;
  void add(const models::PretrainingOutput& o, int64_t rows) {
    mlm_loss += o.mlm_loss.item<double>();
    nsp_loss += o.nsp_loss.item<double>();
    mlm_correct += static_cast<double>(o.mlm_correct);
    mlm_predictions += static_cast<double>(o.mlm_predictions);
    nsp_correct += static_cast<double>(o.nsp_correct);
    sequences += static_cast<double>(rows);
    batches += 1;
  }
  void add(const Counts& o) {
    mlm_loss += o.mlm_loss;
    nsp_loss += o.nsp_loss;
    mlm_correct += o.mlm_correct;
    mlm_predictions += o.mlm_predictions;
    nsp_correct += o.nsp_correct;
    sequences += o.sequences;
    batches += o.batches;
  }
};

EvalResult finish_eval(const Counts& c) {
  EvalResult r;
  r.mlm_loss = c.mlm_loss / std::max(1.0, c.batches);
  r.nsp_loss = c.nsp_loss / std::max(1.0, c.batches);
  r.loss = r.mlm_loss + r.nsp_loss;
  r.mlm_accuracy = c.mlm_correct / std::max(1.0, c.mlm_predictions);
  r.nsp_accuracy = c.nsp_correct / std::max(1.0, c.sequences);
  r.sequences = static_cast<int64_t>(c.sequences);
  return r;
}

// Batches of the eval dataset in order; rank r of W takes batches r, r+W, ...
Counts evaluate_slice(models::BertForPreTraining& model, const data::Dataset& dataset, int64_t batch, int64_t max_batches,
                      int rank, int world) {
  torch::NoGradGuard no_grad;
  const bool was_training = model->is_training();
  model->eval();
  Counts c;
  const int64_t total = std::min<int64_t>(max_batches > 0 ? max_batches : INT64_MAX, (dataset.size() + batch - 1) / batch);
  for (int64_t b = rank; b < total; b += world) {
    std::vector<uint64_t> ids;
    for (int64_t i = b * batch; i < std::min<int64_t>(dataset.size(), (b + 1) * batch); ++i) ids.push_back(static_cast<uint64_t>(i));
    auto host = data::Loader::read_sequences(dataset, ids);
    c.add(model->forward(data::Loader::to_tensors(host)), static_cast<int64_t>(ids.size()));
  }
  if (was_training) model->train();
  return c;
}

}  // namespace

std::string EvalResult::to_json() const {
  return nlohmann::json({{"mlm_loss", mlm_loss}, {"nsp_loss", nsp_loss}, {"loss", loss}, {"mlm_accuracy", mlm_accuracy},
                         {"nsp_accuracy", nsp_accuracy}, {"sequences", sequences}})
      .dump();
}

int train(const TrainOptions& opts) {
  RunConfig cfg = opts.config;
  cfg.validate();
  const FaultPlan faults = FaultPlan::from_environment();  // developers' fault injection (trainer/fault.h)
  // First, so that a preemption signal during start-up (MPI init, reading shards) is not fatal: it is acted
  // on at the first step boundary.
  std::signal(SIGTERM, on_preempt_signal);
  std::signal(SIGUSR1, on_preempt_signal);
  auto comm = collectives::create_communicator("mpi");
  const auto& info = comm->info();
  const int rank = info.rank, world = info.world_size;
  const bool root = rank == 0;
  auto say = [&](const std::string& s) {
    if (root) std::cout << s << std::flush;
  };
  faults.announce(rank);
  // Every small reduction (metrics, flags, energy) fails after the same timeout as the gradient buckets.
  auto reduce_scalars = [&](std::vector<double>& v, const char* what) { sum_over_ranks(*comm, v, cfg.collective_timeout_seconds, what); };
  std::string oversubscribed;
  const int threads = launch::threads_per_rank(launch::physical_cores(), info.local_size, static_cast<int>(cfg.threads), &oversubscribed);
  launch::set_threads(threads);
  if (!oversubscribed.empty() && info.local_rank == 0)
    std::cerr << (launch::rank_prefix() + "warning: " + oversubscribed + "\n") << std::flush;

  // ---- accounting: what the run is billed as; energy meters from now on (start-up is billed too) ----------
  const auto segment_start = Clock::now();
  const std::string config_dir = opts.config_dir.empty() ? fs::path(opts.presets_dir).parent_path().string() : opts.config_dir;
  InstanceProfile profile;
  const CostSettings cost =
      resolve_cost_settings({cfg.instance, cfg.price_per_hour, cfg.pue, cfg.region, cfg.grid_intensity}, cfg.device, config_dir, &profile);
  MeterContext meter_context;
  meter_context.apply_environment();
  meter_context.host = info.local_rank == 0;  // one reader of the host meters per node
  meter_context.device = -1;                  // --device cpu: the CPU is the host's
  meter_context.profile = profile;
  EnergyMonitor energy_monitor(cfg.meters, meter_context, cfg.meter_sample_seconds);

  // ---- data, vocabulary and model ----------------------------------------------------------------
  if (cfg.train_data.empty()) throw RunConfigError("run config: data.train is not set (--data SHARDS)");
  const std::string vocab_path = cfg.vocab.empty() ? data::find_vocab_beside(cfg.train_data) : cfg.vocab;
  if (vocab_path.empty())
    throw RunConfigError(cfg.train_data + ": no vocab.txt beside the shards or their parent; set data.vocab (--vocab FILE)");
  const data::Vocab vocab = data::Vocab::load(vocab_path);
  models::BertConfig model_config = models::load_config(cfg.model, opts.presets_dir);
  model_config.vocab_size = vocab.size();  // the vocabulary the shards were made with
  // Rank 0 validates the shards and writes the index cache first; the other ranks then find them in
  // the cache instead of reading every shard again. A bad shard on rank 0 aborts the job (main).
  if (rank != 0) comm->barrier();
  const data::Dataset dataset = data::Dataset::open(cfg.train_data, {vocab.size(), true});
  std::optional<data::Dataset> eval_set;
  if (!cfg.eval_data.empty()) eval_set = data::Dataset::open(cfg.eval_data, {vocab.size(), true});
  if (rank == 0) comm->barrier();
  if (cfg.seq_len != 0 && cfg.seq_len != dataset.seq_len())
    throw RunConfigError("train.seq_len " + std::to_string(cfg.seq_len) + " differs from the shards' " + std::to_string(dataset.seq_len()));
  cfg.seq_len = dataset.seq_len();
  if (cfg.seq_len > model_config.max_position_embeddings)
    throw RunConfigError("the shards' sequence length " + std::to_string(cfg.seq_len) + " exceeds the model's max_position_embeddings");

  if (cfg.global_batch > 0) {
    if (cfg.global_batch % (cfg.micro_batch * world) != 0)
      throw RunConfigError("train.global_batch " + std::to_string(cfg.global_batch) + " is not divisible by train.micro_batch " +
                           std::to_string(cfg.micro_batch) + " x world size " + std::to_string(world));
    cfg.accumulation = cfg.global_batch / (cfg.micro_batch * world);
  }
  const int64_t global_batch = cfg.micro_batch * cfg.accumulation * world;
  const int64_t total_steps = cfg.steps > 0 ? cfg.steps : (cfg.target_sequences + global_batch - 1) / global_batch;
  if (total_steps <= 0) throw RunConfigError("run config: set train.steps or train.target_sequences");

  const std::string resolved = cfg.to_toml();
  const std::string config_hash = fnv1a64_hex(resolved);
  torch::manual_seed(static_cast<uint64_t>(cfg.seed) * 1000003ull + static_cast<uint64_t>(rank));  // dropout streams
  models::BertForPreTraining model(model_config, static_cast<uint64_t>(cfg.seed));
  // An HF model directory (e.g. phase 1's final/) gives the starting weights; the optimizer starts fresh.
  if (fs::exists(fs::path(cfg.model) / "model.safetensors")) {
    models::load_weights(model, (fs::path(cfg.model) / "model.safetensors").string());
    say("initial weights from " + (fs::path(cfg.model) / "model.safetensors").string() + "\n");
  }
  model->train();
  collectives::ReducerOptions reducer_options;
  reducer_options.timeout_seconds = cfg.collective_timeout_seconds;
  collectives::GradientReducer reducer(model->hf_named_parameters(), *comm, reducer_options);
  OptimizerOptions oo;
  oo.name = cfg.optimizer;
  oo.beta1 = cfg.beta1;
  oo.beta2 = cfg.beta2;
  oo.eps = cfg.eps;
  oo.weight_decay = cfg.weight_decay;
  oo.max_grad_norm = cfg.max_grad_norm;
  auto optimizer = create_optimizer(oo, model->hf_named_parameters());

  // ---- resume ---------------------------------------------------------------------------------------
  const std::string ckpt_root = (fs::path(cfg.run_dir) / "checkpoints").string();
  TrainerState state;
  state.world_size = world;
  state.config_hash = config_hash;
  std::vector<std::string> warnings;
  std::optional<std::string> from;
  if (opts.resume == "auto") {
    from = find_latest_checkpoint(ckpt_root, &warnings);
    // Checkpoints that all fail to verify are not a fresh start: starting over would overwrite them.
    if (!from && !warnings.empty()) {
      std::string why;
      for (const auto& w : warnings) why += "\n  " + w;
      throw CheckpointError(ckpt_root + ": --resume auto found checkpoints but none verifies:" + why +
                            "\nresume from a checkpoint of your own with --resume DIR, or move them away to start over");
    }
  } else if (!opts.resume.empty()) from = opts.resume;
  else if (find_latest_checkpoint(ckpt_root, nullptr))
    throw RunConfigError(ckpt_root + " already holds checkpoints: pass --resume auto to continue, or use another --run-dir");
  for (const auto& w : warnings) say("warning: " + w + "\n");
  if (from) {
    const TrainerState loaded = load_checkpoint(*from, model, *optimizer, rank, world);
    if (loaded.config_hash != config_hash) say("warning: resuming with a config that differs from the checkpoint's\n");
    if (loaded.world_size != world) say("note: resuming on " + std::to_string(world) + " ranks a run saved on " + std::to_string(loaded.world_size) + "\n");
    state = loaded;
    state.world_size = world;
    state.config_hash = config_hash;
    state.segments = loaded.segments + 1;
    say("resumed from " + *from + " at step " + std::to_string(state.step) + "\n");
  } else {
    reducer.broadcast_parameters(0);
  }
  // Nothing is written into the run directory before the resume checks have passed.
  fs::create_directories(cfg.run_dir);
  if (root) {
    std::ofstream(fs::path(cfg.run_dir) / "config.toml") << resolved;
    std::ofstream(fs::path(cfg.run_dir) / "model_config.json") << model_config.to_json_text();
    std::cout << "joule train: " << world << " rank(s) on " << info.node_count << " node(s), " << threads
              << " thread(s) per rank; global batch " << global_batch << " = " << cfg.micro_batch << " x " << cfg.accumulation
              << " x " << world << "; " << total_steps << " steps; " << dataset.size() << " sequences of " << cfg.seq_len
              << " tokens\nresolved config (" << (fs::path(cfg.run_dir) / "config.toml").string() << "):\n"
              << resolved << std::flush;
  }

  Ledger ledger;
  if (from && !state.ledger_json.empty()) {
    ledger = Ledger::from_json(nlohmann::json::parse(state.ledger_json));
    for (Segment& g : ledger.segments)
      if (g.status == "running") g.status = "interrupted (counted to its last checkpoint)";
  }
  if (ledger.run_id.empty()) ledger.run_id = new_run_id();
  ledger.project_name = cfg.project_name;
  {
    Segment g;
    g.start_step = g.end_step = state.step;
    g.ranks = world;
    g.nodes = info.node_count;
    g.started_utc = utc_now_iso();
    g.cost = cost;
    g.meters = energy_monitor.sources();
    ledger.segments.push_back(g);
  }
  const int64_t segment_start_sequences = state.sequences;
  // Brings the current segment up to date with energy summed over ranks (`energy` from a collective).
  auto update_segment = [&](const EnergyTotals& energy, const std::string& status) {
    Segment& g = ledger.segments.back();
    g.energy = energy;
    g.wall_s = seconds_since(segment_start);
    g.end_step = state.step;
    g.sequences = state.sequences - segment_start_sequences;
    g.ended_utc = utc_now_iso();
    g.status = status;
  };
  auto gather_energy = [&] {
    std::vector<double> v = energy_vector(energy_monitor.totals());
    reduce_scalars(v, "energy totals");
    return energy_from(v, 0);
  };
  const int64_t target_sequences = cfg.target_sequences > 0 ? cfg.target_sequences : total_steps * global_batch;
  // MFU against the instance's peak for the training dtype (fp32 on CPU); null when the profile has no figure.
  const double flops_per_sequence = models::training_flops_per_sequence(model_config, cfg.seq_len, dataset.max_predictions());
  double peak_flops = 0;
  try {
    peak_flops = profile.instance_peak_tflops(cfg.device == "cuda" ? "bf16" : "fp32") * 1e12 * info.node_count;
  } catch (const ProfileError&) {
  }
  auto mfu_json = [&](double seq_per_s) {
    return peak_flops > 0 ? nlohmann::json(seq_per_s * flops_per_sequence / peak_flops) : nlohmann::json();
  };
  // --device trainium-sim: the numerics above are real; each step also advances the clock of the simulated
  // cluster, timed by the performance model with the buckets this reducer really launches.
  std::optional<ClusterModel> sim;
  Workload sim_workload;
  std::vector<double> sim_buckets;  // fp32 bytes per bucket, in launch order
  if (cfg.device == "trainium-sim") {
    sim.emplace(load_instance_profile(cfg.sim_instance, (fs::path(config_dir) / "hardware").string()),
                (fs::path(config_dir) / "models").string());
    sim_workload.model = model_config;
    sim_workload.seq_len = cfg.seq_len;
    sim_workload.max_predictions = dataset.max_predictions();
    sim_workload.micro_batch = cfg.micro_batch;
    // Every simulated device does what a rank does here: micro_batch x accumulation sequences per step.
    sim_workload.global_batch = cfg.micro_batch * cfg.accumulation * cfg.sim_nodes * std::max(1, sim->profile().devices);
    sim_workload.sequences = static_cast<double>(cfg.project_sequences);
    sim_workload.dtype = "bf16";
    for (const auto& b : reducer.buckets()) sim_buckets.push_back(static_cast<double>(b.bytes));
  }
  // The buckets and the per-device work are fixed for the run, so every step takes the same simulated time.
  std::optional<StepPrediction> sim_step;
  if (sim) sim_step = sim->predict(sim_workload, static_cast<int>(cfg.sim_nodes), sim_buckets, cost.region.g_per_kwh);
  auto sim_json = [&](const StepPrediction& p) {
    return nlohmann::json{{"label", "simulated target cluster, not measured"},
                          {"instance", p.instance},
                          {"nodes", p.nodes},
                          {"devices", p.devices},
                          {"global_batch", sim_workload.global_batch},
                          {"step_s", p.step_s},
                          {"compute_s", p.compute_s},
                          {"comm_s", p.comm_s},
                          {"exposed_comm_s", p.exposed_comm_s},
                          {"other_s", p.optimizer_s},
                          {"seq_per_s", p.seq_per_s},
                          {"seq_per_hour", p.seq_per_hour},
                          {"clock_s", static_cast<double>(state.step) * p.step_s},
                          {"sequences", state.step * sim_workload.global_batch},
                          {"target_sequences", sim_workload.sequences},
                          {"wall_s_for_target", p.hours * 3600},
                          {"kwh_for_target", p.kwh},
                          {"usd_for_target", p.usd},
                          {"co2_kg_for_target", p.co2_kg},
                          {"buckets", p.bucket_bytes.size()},
                          {"efficiency_basis", sim->efficiency_basis()}};
  };
  if (root) {
    if (sim_step) {
      const StepPrediction& p = *sim_step;
      std::cout << "trainium-sim: real numerics here; simulated clock of " << cfg.sim_nodes << " x " << p.instance << " (" << p.devices
                << " devices, global batch " << sim_workload.global_batch << "): " << p.step_s << " s per step, " << p.seq_per_hour
                << " seq/hour (" << sim->efficiency_basis() << ")\n";
    }
    std::cout << "accounting: " << cost.instance << " x " << info.node_count << " node(s), USD " << cost.usd_per_hour << "/h ("
              << cost.price_source << "), PUE " << cost.pue << ", " << cost.region.g_per_kwh << " g CO2/kWh (" << cost.grid_source
              << ")\nenergy meters: " << energy_monitor.sources() << "\n";
    for (const auto& n : energy_monitor.notices()) std::cout << "note: " << n << "\n";
    std::cout << std::flush;
  }

  data::SamplerConfig sc{static_cast<uint64_t>(dataset.size()), static_cast<uint64_t>(global_batch),
                         static_cast<uint64_t>(cfg.micro_batch), world, rank, static_cast<uint64_t>(cfg.seed)};
  data::Loader loader(dataset, sc, state.sampler);

  // ---- the loop ---------------------------------------------------------------------------------
  std::ofstream metrics;
  if (root) metrics.open(fs::path(cfg.run_dir) / "metrics.jsonl", std::ios::app);
  const auto run_start = Clock::now();
  const double wall_before = state.wall_seconds;
  auto last_checkpoint = Clock::now();
  Counts interval;
  double interval_step_s = 0, interval_comm_s = 0, interval_exposed_s = 0, interval_wait_s = 0, last_grad_norm = 0, last_lr = 0;
  int64_t interval_steps = 0, timed_steps = 0;
  double timed_seconds = 0;
  int exit_code = 0;
  std::optional<EvalResult> last_eval;
  bool reached_target = false;

  const bool launched = std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_RANK") || std::getenv("PMIX_RANK") ||
                        std::getenv("SLURM_PROCID");
  const bool interactive = cfg.progress == "bar" || (cfg.progress == "auto" && world == 1 && !launched && isatty(STDOUT_FILENO));
  while (state.step < total_steps) {
    const auto t0 = Clock::now();
    if (const Fault* f = faults.at("stall", rank, state.step + 1)) {
      std::cerr << (launch::rank_prefix() + "fault injection: stalling " + duration_text(f->seconds) + " before step " +
                    std::to_string(f->step) + "\n") << std::flush;
      std::this_thread::sleep_for(std::chrono::duration<double>(f->seconds));
    }
    const bool poison = faults.at("nan", rank, state.step + 1) != nullptr;
    const double wait_before = loader.wait_seconds();
    reducer.zero_grad();
    Counts step_counts;  // joins the interval's metrics unless the step is skipped
    for (int64_t m = 0; m < cfg.accumulation; ++m) {
      data::PretrainingBatch batch = loader.next();
      reducer.begin_micro_batch(m == cfg.accumulation - 1);
      models::PretrainingOutput out = model->forward(batch);
      if (poison) out.loss = out.loss * std::numeric_limits<double>::quiet_NaN();
      (cfg.accumulation > 1 ? out.loss / static_cast<double>(cfg.accumulation) : out.loss).backward();
      step_counts.add(out, batch.input_ids.size(0));
    }
    reducer.finish();
    last_lr = learning_rate(cfg.lr, optimizer->steps(), total_steps, cfg.warmup_fraction);
    last_grad_norm = optimizer->step(last_lr);  // leaves everything as it was when the norm is NaN/Inf
    launch::release_unused_cpu_blocks();        // sizes this step did not reuse (see launch/cpu_allocator.h)
    ++state.step;
    state.sequences += global_batch;
    state.sampler = loader.state();
    // The reduced gradients, hence their norm, are the same on every rank: all ranks skip together (checked below).
    const bool skipped = !std::isfinite(last_grad_norm);
    if (skipped) {
      ++state.nonfinite_skipped;
      ++state.nonfinite_streak;
      say("warning: step " + std::to_string(state.step) + ": gradient norm " + std::to_string(last_grad_norm) +
          " (NaN/Inf in loss or gradients); update skipped (" + std::to_string(state.nonfinite_streak) + " in a row, " +
          std::to_string(state.nonfinite_skipped) + " in the run)\n");
      if (state.nonfinite_streak >= cfg.max_nonfinite_steps) {
        const auto latest = find_latest_checkpoint(ckpt_root, nullptr);
        throw std::runtime_error("steps " + std::to_string(state.step - state.nonfinite_streak + 1) + ".." + std::to_string(state.step) +
                                 ": NaN/Inf gradients in " + std::to_string(state.nonfinite_streak) +
                                 " consecutive steps (train.max_nonfinite_steps = " + std::to_string(cfg.max_nonfinite_steps) +
                                 "), so the run stops. Newest checkpoint: " + (latest ? *latest : std::string("none")) +
                                 ". What to do: lower optimizer.lr or lengthen optimizer.warmup_fraction, check the data, then "
                                 "--resume auto (or raise train.max_nonfinite_steps)");
      }
    } else {
      state.nonfinite_streak = 0;
      interval.add(step_counts);
    }
    if (faults.at("kill", rank, state.step)) kill_self("after step " + std::to_string(state.step));
    if (faults.at("corrupt-shard", rank, state.step)) {
      for (const auto& shard : dataset.shards()) corrupt_file(shard.path);
      loader.reopen_shards();
      std::cerr << (launch::rank_prefix() + "fault injection: corrupted every training shard after step " + std::to_string(state.step) + "\n");
    }
    const double step_s = seconds_since(t0);
    interval_step_s += step_s;
    interval_comm_s += reducer.stats().comm_seconds;
    interval_exposed_s += reducer.stats().exposed_seconds;
    interval_wait_s += loader.wait_seconds() - wait_before;
    ++interval_steps;
    if (state.step > cfg.throughput_warmup_steps || from) {
      timed_seconds += step_s;
      ++timed_steps;
    }

    // On a terminal, rank 0 keeps one live status line between the logged intervals.
    if (root && interactive && state.step % cfg.log_every_steps != 0) {
      const double rate = timed_steps > 0 ? timed_steps * global_batch / timed_seconds : global_batch / step_s;
      std::printf("\r\033[Kstep %lld/%lld | %.2f seq/s | ETA %s", static_cast<long long>(state.step), static_cast<long long>(total_steps),
                  rate, duration_text((total_steps - state.step) * global_batch / rate).c_str());
      std::fflush(stdout);
    }

    if (state.step % cfg.log_every_steps == 0 || state.step == total_steps) {
      std::vector<double> sums = {interval.mlm_loss, interval.nsp_loss, interval.mlm_correct, interval.mlm_predictions,
                                  interval.batches};
      const size_t energy_offset = sums.size();
      const std::vector<double> joules = energy_vector(energy_monitor.totals());
      sums.insert(sums.end(), joules.begin(), joules.end());
      reduce_scalars(sums, "interval metrics");
      const double previous_joules = ledger.segments.back().energy.total(), previous_wall = ledger.segments.back().wall_s;
      update_segment(energy_from(sums, energy_offset), "running");
      const Figures spent = ledger.totals();
      const double power_w = (ledger.segments.back().energy.total() - previous_joules) / std::max(1e-9, ledger.segments.back().wall_s - previous_wall);
      const double mlm_loss = sums[0] / sums[4], nsp_loss = sums[1] / sums[4], mlm_acc = sums[2] / std::max(1.0, sums[3]);
      const double seq_per_s = timed_steps > 0 ? timed_steps * global_batch / timed_seconds : interval_steps * global_batch / interval_step_s;
      const double eta = (total_steps - state.step) * global_batch / seq_per_s;
      if (root) {
        nlohmann::json j = {{"step", state.step},
                            {"sequences", state.sequences},
                            {"loss", mlm_loss + nsp_loss},
                            {"mlm_loss", mlm_loss},
                            {"nsp_loss", nsp_loss},
                            {"mlm_acc", mlm_acc},
                            {"lr", last_lr},
                            {"grad_norm", last_grad_norm},
                            {"nonfinite_skipped", state.nonfinite_skipped},
                            {"seq_per_s", seq_per_s},
                            {"seq_per_hour", seq_per_s * 3600},
                            {"tokens_per_s", seq_per_s * cfg.seq_len},
                            {"mfu", mfu_json(seq_per_s)},
                            {"data_wait_s", interval_wait_s / interval_steps},
                            {"comm_s", interval_comm_s / interval_steps},
                            {"exposed_comm_s", interval_exposed_s / interval_steps},
                            {"step_s", interval_step_s / interval_steps},
                            {"wall_s", wall_before + seconds_since(run_start)},
                            {"power_w", power_w},
                            {"it_kwh", spent.it_kwh},
                            {"energy_kwh", spent.facility_kwh},
                            {"cost_usd", spent.usd},
                            {"co2_kg", spent.co2_kg},
                            {"energy_source", energy_json(ledger.energy())["source"]}};
        if (sim_step) j["sim"] = sim_json(*sim_step);
        // After a warm-up fraction of the target, project the whole run from the measured rates.
        if (timed_steps > 0 && state.sequences >= cfg.project_after_fraction * target_sequences) {
          const Projection p = project(target_sequences, state.sequences, ledger.wall_s(), spent, seq_per_s);
          ledger.add_projection({state.step, state.sequences, ledger.wall_s(), p.wall_s, p.kwh, p.usd, p.co2_kg});
          j["projection"] = {{"sequences", p.sequences}, {"wall_s", p.wall_s}, {"kwh", p.kwh}, {"usd", p.usd}, {"co2_kg", p.co2_kg}};
        }
        metrics << j.dump() << "\n" << std::flush;
        if (!cfg.prometheus_file.empty()) {  // written whole, then renamed: a scraper never sees half a file
          const std::string tmp = cfg.prometheus_file + ".tmp";
          std::ofstream(tmp) << prometheus_text(j, ledger.run_id);
          std::error_code ec;
          fs::rename(tmp, cfg.prometheus_file, ec);
        }
        char line[320];
        std::snprintf(line, sizeof line, "step %lld/%lld | %lld seq | loss %.4f | mlm_acc %.3f | lr %.2e | %.2f seq/s | ETA %s\n",
                      static_cast<long long>(state.step), static_cast<long long>(total_steps), static_cast<long long>(state.sequences),
                      mlm_loss + nsp_loss, mlm_acc, last_lr, seq_per_s, duration_text(eta).c_str());
        std::cout << (interactive ? "\r\033[K" : "") << line << std::flush;
      }
      interval = Counts{};
      interval_step_s = interval_comm_s = interval_exposed_s = interval_wait_s = 0;
      interval_steps = 0;
    }

    if (eval_set && cfg.eval_every_steps > 0 && (state.step % cfg.eval_every_steps == 0 || state.step == total_steps)) {
      Counts c = evaluate_slice(model, *eval_set, cfg.eval_batch, cfg.eval_max_batches, rank, world);
      std::vector<double> v = {c.mlm_loss, c.nsp_loss, c.mlm_correct, c.mlm_predictions, c.nsp_correct, c.sequences, c.batches};
      reduce_scalars(v, "eval metrics");
      last_eval = finish_eval({v[0], v[1], v[2], v[3], v[4], v[5], v[6]});
      if (root) {
        metrics << nlohmann::json({{"step", state.step}, {"eval", nlohmann::json::parse(last_eval->to_json())}}).dump() << "\n" << std::flush;
        std::printf("eval at step %lld: mlm_acc %.4f, nsp_acc %.4f, loss %.4f (%lld sequences)\n", static_cast<long long>(state.step),
                    last_eval->mlm_accuracy, last_eval->nsp_accuracy, last_eval->loss, static_cast<long long>(last_eval->sequences));
        std::fflush(stdout);
      }
      if (cfg.eval_target_mlm_accuracy > 0 && last_eval->mlm_accuracy >= cfg.eval_target_mlm_accuracy) {
        say("reached the target masked-LM accuracy " + std::to_string(cfg.eval_target_mlm_accuracy) + "\n");
        reached_target = true;
      }
    }

    // Ranks agree on a preemption signal at the step boundary (one rank may have received it alone).
    if (faults.at("preempt", rank, state.step)) g_signal.store(SIGUSR1);
    // The minutes-based decision is rank 0's, shared in the same reduction, so every rank saves together.
    // The same reduction confirms that every rank skipped (or applied) this step's update.
    const bool minutes_due = root && cfg.checkpoint_every_minutes > 0 && seconds_since(last_checkpoint) >= cfg.checkpoint_every_minutes * 60;
    std::vector<double> flag = {g_signal.load() != 0 ? 1.0 : 0.0, minutes_due ? 1.0 : 0.0, skipped ? 1.0 : 0.0};
    reduce_scalars(flag, "step-boundary flags");
    if (flag[2] != 0 && flag[2] != world)
      throw std::runtime_error("step " + std::to_string(state.step) + ": " + std::to_string(static_cast<int>(flag[2])) + " of " +
                               std::to_string(world) + " ranks found NaN/Inf gradients; the replicas have diverged (a bug: please report it)");
    const bool preempted = flag[0] > 0;
    const bool periodic = (cfg.checkpoint_every_steps > 0 && state.step % cfg.checkpoint_every_steps == 0) || flag[1] > 0;
    if (preempted || periodic) {
      state.wall_seconds = wall_before + seconds_since(run_start);
      update_segment(gather_energy(), preempted ? "preempted" : "running");
      state.ledger_json = ledger.to_json().dump();
      const auto t = Clock::now();
      const std::string dir = save_checkpoint(ckpt_root, model, *optimizer, state, *comm, cfg.checkpoint_keep,
                                              [&](const std::string& stage) { faults.checkpoint_stage(rank, state.step, stage); });
      last_checkpoint = Clock::now();
      say("checkpoint " + dir + " (" + duration_text(seconds_since(t)) + ")\n");
      if (preempted) {
        say("preempted (signal): checkpoint saved; exiting with code " + std::to_string(kExitPreempted) + " for requeue + --resume auto\n");
        exit_code = kExitPreempted;
        break;
      }
    }
    if (reached_target) break;
  }

  state.wall_seconds = wall_before + seconds_since(run_start);
  if (exit_code == 0 && root) models::save_model_dir(model, (fs::path(cfg.run_dir) / "final").string());

  // ---- the training-cost summary ------------------------------------------------------------------
  const double seq_per_s = timed_steps > 0 ? timed_steps * global_batch / timed_seconds : state.sequences / state.wall_seconds;
  const std::string status = exit_code == kExitPreempted ? "preempted" : reached_target ? "finished (reached the target accuracy)" : "finished";
  update_segment(gather_energy(), exit_code == kExitPreempted ? "preempted" : "finished");
  if (root) {
    const Figures spent = ledger.totals();
    const double billed_wall = ledger.wall_s();
    const Projection to_target = project(target_sequences, state.sequences, billed_wall, spent, seq_per_s);
    const Projection card = project(cfg.project_sequences, 0, billed_wall, spent, seq_per_s);
    const nlohmann::json ledger_json = ledger.to_json();
    const nlohmann::json& history = ledger_json["projection_history"];
    nlohmann::json segment_list = ledger_json["segments"];
    for (auto& g : segment_list) g.erase("energy_joules");
    const nlohmann::json energy = energy_json(ledger.energy());
    nlohmann::json notices = nlohmann::json::array();
    for (const auto& n : energy_monitor.notices()) notices.push_back(n);
    if (energy["source"].get<std::string>().find("model") != std::string::npos)
      notices.push_back("energy partly or wholly modelled: instance profile watts x measured CPU utilization (" + cost.instance_file + ")");
    auto projection_json = [](const Projection& p) {
      return nlohmann::json{{"sequences", p.sequences}, {"wall_s", p.wall_s}, {"kwh", p.kwh}, {"usd", p.usd}, {"co2_kg", p.co2_kg}};
    };
    nlohmann::json summary = {{"run_dir", cfg.run_dir},
                              {"run_id", ledger.run_id},
                              {"project_name", ledger.project_name},
                              {"status", status},
                              {"ranks", world},
                              {"nodes", info.node_count},
                              {"steps", state.step},
                              {"sequences", state.sequences},
                              {"wall_s", state.wall_seconds},
                              {"billed_wall_s", billed_wall},
                              {"segments", state.segments},
                              {"nonfinite_skipped_steps", state.nonfinite_skipped},
                              {"seq_per_s", seq_per_s},
                              {"seq_per_hour", seq_per_s * 3600},
                              {"mfu", mfu_json(seq_per_s)},
                              {"target_sequences", target_sequences},
                              {"workload", {{"model", cfg.model}, {"seq_len", cfg.seq_len}, {"max_predictions", dataset.max_predictions()},
                                            {"global_batch", global_batch}, {"flops_per_sequence", flops_per_sequence},
                                            {"dtype", cfg.device == "cuda" ? "bf16" : "fp32"}}},
                              {"projected_wall_s_for_target", to_target.wall_s},
                              {"projected_wall_s_for_450M", card.wall_s},
                              {"instance", ledger_json["segments"].back()["cost"]},
                              {"host", host_json(profile)},
                              {"energy", energy},
                              {"energy_kwh", spent.facility_kwh},
                              {"energy_source", energy["source"]},
                              {"cost_usd", spent.usd},
                              {"instance_hours", spent.instance_hours},
                              {"co2_kg", spent.co2_kg},
                              {"projection", {{"target", projection_json(to_target)}, {"card_450M", projection_json(card)}, {"history", history}}},
                              {"segment_list", segment_list},
                              {"notices", notices},
                              {"preempted", exit_code == kExitPreempted}};
    if (last_eval) summary["eval"] = nlohmann::json::parse(last_eval->to_json());
    if (sim_step) summary["simulated"] = sim_json(*sim_step);
    if (exit_code == 0) summary["final_dir"] = (fs::path(cfg.run_dir) / "final").string();
    std::ofstream(fs::path(cfg.run_dir) / "summary.json") << summary.dump(2) << "\n";
    std::ofstream(fs::path(cfg.run_dir) / "emissions.csv") << emissions_csv(summary);
    std::cout << summary_table(summary) << std::flush;
  }
  comm->barrier();
  return exit_code;
}

EvalResult evaluate_model_dir(const std::string& model_dir, const std::string& data_spec, int64_t batch, int64_t max_batches) {
  models::BertForPreTraining model = models::load_model_dir(model_dir);
  const data::Dataset dataset = data::Dataset::open(data_spec, {model->config().vocab_size, true});
  return finish_eval(evaluate_slice(model, dataset, batch, max_batches, 0, 1));
}

std::string export_checkpoint(const std::string& checkpoint_or_run, const std::string& out_dir) {
  std::string dir = checkpoint_or_run;
  if (!fs::exists(fs::path(dir) / "manifest.json")) {
    std::vector<std::string> warnings;
    auto latest = find_latest_checkpoint((fs::path(dir) / "checkpoints").string(), &warnings);
    for (const auto& w : warnings) std::cerr << "warning: " << w << "\n";
    if (!latest) throw CheckpointError(checkpoint_or_run + ": neither a checkpoint nor a run directory with a complete checkpoint");
    dir = *latest;
  }
  // The config travels in the run directory; rebuild it from the checkpoint's run config.
  const fs::path run = fs::path(dir).parent_path().parent_path();
  const fs::path final_config = run / "final" / "config.json";
  models::BertConfig config;
  if (fs::exists(run / "model_config.json")) config = models::BertConfig::from_json_file((run / "model_config.json").string());
  else if (fs::exists(final_config)) config = models::BertConfig::from_json_file(final_config.string());
  else throw CheckpointError(dir + ": no model_config.json in the run directory " + run.string());
  models::BertForPreTraining model(config);
  models::load_weights(model, (fs::path(dir) / "model.safetensors").string());
  models::save_model_dir(model, out_dir);
  return dir;
}

}  // namespace joule::trainer
