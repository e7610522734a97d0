#include "trainer/run_setup.h"

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <iostream>

#include "data/shard.h"
#include "data/tokenizer.h"
#include "launch/placement.h"
#include "launch/process.h"
#include "launch/runtime.h"
#include "launch/util/file_io.h"
#include "launch/util/format.h"
#include "launch/util/hash.h"
#include "models/model_dir.h"
#include "trainer/data_record.h"

namespace joule::trainer {
namespace fs = std::filesystem;

namespace {

// The batch arithmetic, and the data set's size checked against it, before anything is written (the sampler would
// refuse it later, after the run directory).
void resolve_batches(ResolvedRun& run) {
  RunConfig& cfg = run.cfg;
  const BatchPlan plan =
      plan_batches(cfg.train, run.world, static_cast<int64_t>(run.dataset().size()), cfg.data.train,
                   static_cast<double>(run.dataset().sequences()) / static_cast<double>(run.dataset().size()));
  cfg.train.accumulation = plan.accumulation;
  run.global_batch = plan.global_batch;
  run.total_steps = plan.total_steps;
  run.target_sequences = plan.target_sequences;
}

// data.train = D, a `joule data create` output, means D/train, and D/eval (if made) when data.eval is not set or
// `eval_from_data_root` (see resolve_run).
void resolve_data_create_output(RunConfig& cfg, bool eval_from_data_root) {
  const std::string train = data::data_create_split(cfg.data.train, "train");
  if (train == cfg.data.train) return;
  std::error_code ec;
  if ((cfg.data.eval.empty() || eval_from_data_root) && fs::is_directory(fs::path(cfg.data.train) / "eval", ec))
    cfg.data.eval = data::data_create_split(cfg.data.train, "eval");
  cfg.data.train = train;
}

// train.fp32_gemm as the run resolved it (timed at start-up, or kept from the checkpoint on a resume).
AutomaticValue used_fp32_gemm(const launch::GemmPath& gemm) {
  return {"train.fp32_gemm", launch::fp32_gemm_name(gemm.choice.fp32), gemm.choice.reason};
}

// What the run worked out for the keys its config may leave automatic (with_automatic_values applies each only where
// the config did).
std::vector<AutomaticValue> automatic_values(const ResolvedRun& run, const std::string& vocab_path,
                                             const TrainingProcess& process, const cost::CostSettings& cost) {
  const TrainOptions& t = run.cfg.train;
  const std::string precision = models::precision_name(run.precision.precision);
  auto number = [](double v) { return joule::option_number_text(v); };
  const std::string& reason = run.precision.reason;  // "precision auto -> bf16 mixed precision: this CPU (...) has ..."
  const std::string why = reason.find(": ") == std::string::npos ? reason : reason.substr(reason.find(": ") + 2);
  std::vector<AutomaticValue> used = {
      {"train.steps", "",
       "0: " + std::to_string(run.total_steps) + " steps of " + std::to_string(run.global_batch) +
           " sequences from train.target_sequences"},
      {"train.global_batch", std::to_string(run.global_batch),
       "micro_batch " + std::to_string(t.micro_batch) + " x accumulation " + std::to_string(t.accumulation) + " x " +
           std::to_string(run.world) + " rank(s)"},
      {"train.threads", std::to_string(process.threads), process.threads_source},
      {"train.precision", precision, why},
      {"optimizer.shard", sharding_name(run.shard), run.shard_source},

      {"data.vocab", vocab_path, "vocab.txt beside the shards"},
      {"accounting.instance", cost.instance,
       "the machine the numerics run on (profile " + fs::path(cost.instance_file).filename().string() + ")"},
      {"accounting.price_per_hour", number(cost.usd_per_hour), "USD per instance-hour, " + cost.price_source},
      {"accounting.pue", number(cost.pue), cost.pue_source},
      {"accounting.grid_intensity", number(cost.region.g_per_kwh), "g CO2/kWh, " + cost.grid_source},
  };
  if (t.device != launch::DeviceKind::cuda)  // a GPU's matmuls are not the CPU's BLAS or oneDNN
    used.push_back(used_fp32_gemm(run.gemm));
  return used;
}

// `mine` with its fp32 library replaced by `name` ("blas", "onednn": rank 0's or a checkpoint's, `whose` says),
// for `reason`. A rank where oneDNN's products disagree with the BLAS's cannot take "onednn": it stops the job naming
// itself.
launch::GemmPath with_fp32_gemm(launch::GemmPath mine, const std::string& name, const std::string& reason,
                                const std::string& whose, int rank) {
  if (name == "onednn" && !launch::onednn_fp32_usable(mine.rates))
    throw RunConfigError("rank " + std::to_string(rank) + ": " + whose +
                             " fp32 GEMMs on oneDNN, whose products differ here from the BLAS's by " +
                             std::to_string(mine.rates.onednn_fp32_difference),
                         "set train.fp32_gemm to blas for this job");
  mine.choice = {name == "onednn" ? launch::Fp32Gemm::kOnednn : launch::Fp32Gemm::kBlas, reason};
  return mine;
}

// Every rank measures its GEMMs and takes rank 0's fp32 path (timings alone must not split a job across two
// paths); a rank that cannot run rank 0's choice (oneDNN's products disagree there) stops the job naming itself.
launch::GemmPath agreed_gemm_path(const TrainOptions& options, collectives::Communicator& comm) {
  launch::GemmPath mine = launch::choose_gemm_path(options.fp32_gemm);
  std::string chosen = std::string(launch::fp32_gemm_name(mine.choice.fp32)) + "\n" + mine.choice.reason;
  collectives::broadcast_string(comm, chosen, 0, options.collective_timeout_seconds, "the fp32 GEMM path");
  const std::string name = chosen.substr(0, chosen.find('\n'));
  if (name == launch::fp32_gemm_name(mine.choice.fp32)) return mine;
  return with_fp32_gemm(mine, name, "rank 0's choice: " + chosen.substr(chosen.find('\n') + 1), "rank 0 runs",
                        comm.info().rank);
}

// Where the run's fp32 Linear layers run, as trainer_state.json records it: "blas" or "onednn" on a CPU, "cuda" on a
// GPU (whose matmuls are neither).
std::string fp32_gemm_record(const ResolvedRun& run) {
  return run.cfg.train.device == launch::DeviceKind::cuda ? "cuda" : launch::fp32_gemm_name(run.gemm.choice.fp32);
}

// What the run's arithmetic is, for the ranks' agreement and a resume's comparison: the resolved config, and where
// auto may resolve otherwise on another machine, the precision and the fp32 GEMM library used.
std::string run_config_hash(const ResolvedRun& run) {
  return joule::fnv1a64_hex(run.resolved_toml +
                            "# compute precision: " + models::precision_name(run.precision.precision) +
                            "\n# fp32 gemm: " + launch::fp32_gemm_name(run.gemm.choice.fp32) + "\n");
}

}  // namespace

BatchPlan plan_batches(const TrainOptions& train, int world, int64_t available, const std::string& data_name,
                       double sequences_per_row) {
  BatchPlan p;
  p.accumulation = train.accumulation;
  if (train.global_batch > 0) {
    if (train.global_batch % (train.micro_batch * world) != 0)
      throw RunConfigError("train.global_batch " + std::to_string(train.global_batch) +
                           " is not divisible by train.micro_batch " + std::to_string(train.micro_batch) +
                           " x world size " + std::to_string(world));
    p.accumulation = train.global_batch / (train.micro_batch * world);
  }
  p.global_batch = train.micro_batch * p.accumulation * world;
  // A step trains on global_batch rows: as many sequences unless packed, then sequences_per_row times as many.
  const double step_sequences = static_cast<double>(p.global_batch) * sequences_per_row;
  p.total_steps = train.steps > 0
                      ? train.steps
                      : static_cast<int64_t>(std::ceil(static_cast<double>(train.target_sequences) / step_sequences));
  if (p.total_steps <= 0) throw RunConfigError("run config: set train.steps or train.target_sequences");
  p.target_sequences = train.target_sequences > 0
                           ? train.target_sequences
                           : static_cast<int64_t>(std::llround(static_cast<double>(p.total_steps) * step_sequences));
  if (p.global_batch > available)
    throw RunConfigError("the global batch " + std::to_string(p.global_batch) + " (train.micro_batch " +
                             std::to_string(train.micro_batch) + " x accumulation " + std::to_string(p.accumulation) +
                             " x " + std::to_string(world) + " ranks) is larger than the " + std::to_string(available) +
                             " sequences of " + data_name,
                         "lower train.global_batch (or train.micro_batch), or give data.train more shards");
  return p;
}

TrainingProcess start_training_process(const TrainOptions& options) {
  launch::require_device(options.device);
  TrainingProcess p;
  p.comm = collectives::create_communicator(launch::communicator_backend(options.device));
  const collectives::ProcessGroupInfo& info = p.comm->info();
  p.device = launch::choose_device(options.device, info.local_rank);
  std::string oversubscribed;
  const launch::CoreView cores = collectives::node_core_view(*p.comm, options.collective_timeout_seconds);
  p.threads = launch::threads_per_rank(cores, info.local_size, static_cast<int>(options.threads), &oversubscribed);
  p.threads_source = p.threads == cores.own && cores.own < cores.node / std::max(1, info.local_size)
                         ? "the " + std::to_string(cores.own) + " core(s) the launcher binds this rank to"
                         : "this node's " + std::to_string(cores.node) + " core(s) / " +
                               std::to_string(info.local_size) + " rank(s) on it";
  launch::set_threads(p.threads);
  if (options.device != launch::DeviceKind::cuda) p.gemm = agreed_gemm_path(options, *p.comm);
  if (!oversubscribed.empty() && info.local_rank == 0)
    std::cerr << (launch::rank_prefix() + "warning: " + oversubscribed + "\n") << std::flush;
  return p;
}

namespace {

// The run's train (and eval) shards, opened. Rank 0 validates the shards and writes the index cache first; the other
// ranks then find them in the cache instead of reading every shard again. A bad shard on rank 0 aborts the job (main).
void open_datasets(ResolvedRun& run, int64_t vocab_size, collectives::Communicator& comm) {
  const bool root = comm.info().rank == 0;
  // Rank 0's checks read every shard the cache does not hold, inflating every chunk (~29 MB of shard file a second on
  // one Zen 5 core): the others wait the run's collective timeout plus those bytes at 5 MB/s. A fixed 600 s failed the
  // first start on a full-size data set whatever the timeout (150M sequences: ~14 GB of joule's shards, ~8 minutes).
  // Rank 0 arrives last: its wait needs no allowance, and it stats no shard for one.
  constexpr double kSlowestCheckBytesPerSecond = 5e6;
  double unchecked = 0;
  if (!root)
    for (const std::string& spec : {run.cfg.data.train, run.cfg.data.eval})
      if (!spec.empty()) unchecked += static_cast<double>(data::Dataset::bytes_to_validate(spec));
  const collectives::CollectiveOptions shards_checked{
      collectives::ReduceOp::kSum,
      collectives::io_wait_seconds(run.cfg.train.collective_timeout_seconds, unchecked, kSlowestCheckBytesPerSecond),
      "rank 0 checking the shards"};
  if (!root) comm.barrier(shards_checked);
  run.train_set.emplace(data::Dataset::open(run.cfg.data.train, {vocab_size, true}));
  if (!run.cfg.data.eval.empty()) {
    try {
      run.eval_set.emplace(data::Dataset::open(run.cfg.data.eval, {vocab_size, true}));
    } catch (const data::ShardError& e) {  // the same error, with advice about the key that named these shards
      throw data::ShardError(
          e.what(),
          "check data.eval (--eval-data), which names the eval shards: a directory, a glob or a list "
          "file; or leave data.eval unset to train without eval");
    }
  }
  if (root) comm.barrier(shards_checked);
}

}  // namespace

ResolvedRun resolve_run(const RunConfig& validated, const std::string& presets_dir, const TrainingProcess& process,
                        const cost::CostSettings& cost, bool eval_from_data_root) {
  collectives::Communicator& comm = *process.comm;
  ResolvedRun run;
  run.cfg = validated;
  run.device = process.device;
  run.gemm = process.gemm;
  RunConfig& cfg = run.cfg;
  run.world = comm.info().world_size;
  if (cfg.data.train.empty()) throw RunConfigError("run config: data.train is not set (--data SHARDS)");
  resolve_data_create_output(cfg, eval_from_data_root);
  const std::string vocab_path = cfg.data.vocab.empty() ? data::find_vocab_beside(cfg.data.train) : cfg.data.vocab;
  if (vocab_path.empty()) {
    std::error_code ec;  // no vocab.txt beside shards that are not there: say the shards are missing
    if (cfg.data.train.find_first_of("*?[") == std::string::npos && !fs::exists(cfg.data.train, ec))
      throw data::ShardError(cfg.data.train + ": no such shard directory, file or list (data.train, --data)",
                             "give --data the shards: a directory (e.g. the train/ of `joule data create`), a glob "
                             "or a list file");
    throw RunConfigError(cfg.data.train +
                         ": no vocab.txt beside the shards or their parent; set data.vocab (--vocab FILE)");
  }
  const int64_t vocab_size = data::Vocab::load(vocab_path).size();
  run.model_config = models::load_config(cfg.model.config, presets_dir);
  // Trained weights (a model directory's model.safetensors) belong to the vocabulary they were trained with.
  if (std::error_code ec;
      run.model_config.vocab_size != vocab_size && fs::exists(fs::path(cfg.model.config) / "model.safetensors", ec))
    throw RunConfigError("model.config " + cfg.model.config + " was trained with a vocabulary of " +
                             std::to_string(run.model_config.vocab_size) + " tokens; the data's " + vocab_path +
                             " has " + std::to_string(vocab_size),
                         "train on shards made with the model's vocabulary (joule data create --vocab), or start "
                         "from a preset or a config.json (fresh weights)");
  const std::string vocab_checksum = hex64(fnv1a64_file(vocab_path));
  if (std::error_code ec; fs::exists(fs::path(cfg.model.config) / "model.safetensors", ec)) {
    const std::string model_vocab = models::model_vocab_checksum(cfg.model.config, run.model_config);
    if (!model_vocab.empty() && model_vocab != vocab_checksum)
      throw RunConfigError("model.config " + cfg.model.config + " was trained with another vocabulary (checksum " +
                               model_vocab + ") than the data's " + vocab_path + " (" + vocab_checksum +
                               "), of the same size: every token id would mean another word",
                           "train on shards made with the model's vocabulary (joule data create --vocab), or start "
                           "from a preset or a config.json (fresh weights)");
  }
  run.model_config.vocab_size = vocab_size;         // the vocabulary the shards were made with
  run.model_config.vocab_fnv1a64 = vocab_checksum;  // recorded in model_config.json, final/ and exports
  if (run.model_config.type_vocab_size < 2)
    throw RunConfigError("model.config " + cfg.model.config + ": type_vocab_size is " +
                             std::to_string(run.model_config.type_vocab_size) +
                             ", but pretraining shards mark two segments (segment_ids 0 and 1)",
                         "set type_vocab_size to 2 in the model's config.json (BERT's value)");
  open_datasets(run, vocab_size, comm);
  if (cfg.eval.target_mlm_accuracy > 0 && (!run.eval_set || cfg.eval.every_steps == 0))
    throw RunConfigError("eval.target_mlm_accuracy = " + format_number("%g", cfg.eval.target_mlm_accuracy) +
                             " needs evals to reach it, but " +
                             (run.eval_set ? std::string("eval.every_steps is 0") : std::string("data.eval is unset")),
                         "set data.eval (--eval-data) and eval.every_steps, or leave eval.target_mlm_accuracy at 0");
  data::check_vocab_file(*run.train_set, vocab_path);
  if (run.eval_set) {
    data::check_vocab_file(*run.eval_set, vocab_path);
    data::check_held_out(*run.train_set, *run.eval_set);
  }
  if (cfg.train.seq_len != 0 && cfg.train.seq_len != run.dataset().seq_len())
    throw RunConfigError("train.seq_len " + std::to_string(cfg.train.seq_len) + " differs from the shards' " +
                         std::to_string(run.dataset().seq_len()));
  cfg.train.seq_len = run.dataset().seq_len();
  if (cfg.train.seq_len > run.model_config.max_position_embeddings)
    throw RunConfigError(cfg.data.train + ": the shards' sequence length " + std::to_string(cfg.train.seq_len) +
                             " exceeds model.config " + cfg.model.config + "'s max_position_embeddings " +
                             std::to_string(run.model_config.max_position_embeddings),
                         "make the shards with a --seq-len the model takes, or use a model with more positions");
  resolve_batches(run);
  run.shard =
      resolve_sharding(cfg.optimizer.shard, run.world, cfg.train.device == launch::DeviceKind::cpu, &run.shard_source);
  run.resolved_toml = cfg.to_toml();
  run.precision = models::choose_precision(cfg.train.precision, cfg.train.device == launch::DeviceKind::cuda,
                                           launch::CpuIsa::current());
  run.config_hash = run_config_hash(run);
  run.used = automatic_values(run, vocab_path, process, cost);
  return run;
}

namespace {

// An HF model directory (e.g. phase 1's final/) gives the starting weights: its model.safetensors. A directory with
// only config.json starts from fresh weights (said in the log); one whose weights are in a form joule does not read
// (PyTorch .bin, sharded safetensors) is refused rather than trained from scratch without a word.
std::string initial_weights(const std::string& model_config) {
  std::error_code ec;
  if (!fs::is_directory(model_config, ec)) return "";
  const fs::path weights = fs::path(model_config) / "model.safetensors";
  if (fs::exists(weights, ec)) return weights.string();
  for (const auto& entry : fs::directory_iterator(model_config, ec)) {
    const std::string name = entry.path().filename().string();
    const std::string ext = entry.path().extension().string();
    if (ext == ".bin" || ext == ".safetensors" || ext == ".pt" || ext == ".pth" || ext == ".ckpt" || ext == ".h5")
      throw RunConfigError("model.config " + model_config + ": the weights are in " + name +
                               ", and joule reads only model.safetensors (one file)",
                           "convert them with HF transformers (save_pretrained(DIR, safe_serialization=True, "
                           "max_shard_size=\"100GB\")), or give a directory with config.json alone to start from "
                           "fresh weights");
  }
  return "";
}

}  // namespace

nlohmann::json gemm_record(const launch::GemmPath& gemm) {
  const launch::CpuIsa& isa = launch::CpuIsa::current();
  auto share = [&](double gflops, const char* dtype) {
    const double peak = gemm.clock_ghz * launch::cpu_flops_per_cycle(isa, dtype);
    return peak > 0 && gflops > 0 ? nlohmann::json(gflops / peak) : nlohmann::json();
  };
  const launch::GemmRates& r = gemm.rates;
  return {{"fp32", launch::fp32_gemm_name(gemm.choice.fp32)},
          {"fp32_reason", gemm.choice.reason},
          {"blas", gemm.blas.core.empty() ? gemm.blas_description : "OpenBLAS " + gemm.blas.core},
          {"blas_fp32_gflops_per_core", r.blas_fp32},
          {"blas_fp32_peak_fraction", share(r.blas_fp32, "fp32")},
          {"onednn_isa", r.onednn_isa},
          {"onednn_fp32_gflops_per_core", r.onednn_fp32},
          {"onednn_fp32_peak_fraction", share(r.onednn_fp32, "fp32")},
          {"onednn_fp32_difference", r.onednn_fp32_difference},
          {"bf16_gflops_per_core", r.onednn_bf16},
          {"bf16_peak_fraction", share(r.onednn_bf16, "bf16")},
          {"clock_ghz", gemm.clock_ghz},
          {"line", gemm.line()}};
}

TrainingSpec training_spec(const ResolvedRun& run) {
  const RunConfig& cfg = run.cfg;
  TrainingSpec spec;
  spec.model = run.model_config;
  spec.precision = run.precision.precision;
  spec.fp32_gemm = run.gemm.choice.fp32;
  spec.device = run.device;
  spec.seed = static_cast<uint64_t>(cfg.train.seed);
  spec.initial_weights = initial_weights(cfg.model.config);
  spec.optimizer = cfg.optimizer;
  spec.reducer.timeout_seconds = cfg.train.collective_timeout_seconds;
  spec.optimizer.shard = run.shard;
  spec.reducer.shard = run.shard == OptimizerSharding::zero1;
  return spec;
}

TrainingStack build_training(const TrainingSpec& spec, collectives::Communicator& comm) {
  TrainingStack o;
  // torch's generator, for what draws from it (a run's dropout masks are keyed by its rows instead: models/dropout.h).
  torch::manual_seed(spec.seed * 1000003ull + static_cast<uint64_t>(comm.info().rank));
  o.model = models::BertForPreTraining(spec.model, spec.seed);
  o.model->set_precision(spec.precision, spec.fp32_gemm);
  if (!spec.initial_weights.empty()) {
    models::load_weights(o.model, spec.initial_weights);
    if (comm.info().rank == 0) *spec.log << "initial weights from " << spec.initial_weights << "\n" << std::flush;
  } else if (comm.info().rank == 0) {
    *spec.log << "initial weights: fresh (seed " << spec.seed << ")\n" << std::flush;
  }
  o.model->to(spec.device.device);
  o.model->train();
  collectives::ReducerOptions reducer = spec.reducer;
  if (reducer.shard && spec.precision == models::Precision::kBf16)
    reducer.bf16_parameters = o.model->matmul_weight_names();  // gathered in bf16 from fp32 master shards
  o.reducer = std::make_unique<collectives::GradientReducer>(o.model->hf_named_parameters(), comm, reducer);
  OptimizerShard shard;
  if (o.reducer->sharded()) {
    shard.ranges = o.reducer->shard_ranges();
    shard.masters = o.reducer->masters();
    const double timeout = spec.reducer.timeout_seconds;
    shard.sum_over_ranks = [&comm, timeout](std::vector<double>& v) {
      collectives::sum_over_ranks(comm, v, timeout, "the optimizer's per-parameter norms");
    };
  }
  o.optimizer = create_optimizer(spec.optimizer, o.model->hf_named_parameters(), std::move(shard));
  return o;
}

StartPoint choose_start_on_root(const std::string& run_dir, const std::string& resume) {
  const std::string ckpt_root = (fs::path(run_dir) / "checkpoints").string();
  // The files a run keeps its history in are its own regular files: a FIFO there would stall the run when the pipe
  // fills, a link would write somewhere else (checked before any step, on a fresh run and on a resume).
  for (const char* file : {"metrics.jsonl", "mllog.txt", "summary.json", "emissions.csv", "config.toml",
                           "model_config.json", "report.html"})
    check_replaceable((fs::path(run_dir) / file).string());
  StartPoint start;
  if (resume == "auto") {
    // Directories of yours under checkpoints/ (best/, step_6_before_lr_change/) are never resumed from or pruned.
    std::vector<std::string> ignored;
    std::error_code ec;
    if (fs::is_directory(ckpt_root, ec)) {
      const std::vector<std::string> ours = list_checkpoints(ckpt_root);
      for (const auto& e : fs::directory_iterator(ckpt_root, ec))
        if (std::find(ours.begin(), ours.end(), e.path().string()) == ours.end())
          ignored.push_back("ignoring " + e.path().string() +
                            ": not a name joule gives a checkpoint (step_NNNNNNNN); left alone");
    }
    start.checkpoint = find_latest_checkpoint(ckpt_root, &start.warnings);
    // Checkpoints that all fail to verify are not a fresh start: starting over would overwrite them.
    if (!start.checkpoint && !start.warnings.empty()) {
      std::string why;
      for (const auto& w : start.warnings) why += "\n  " + w;
      throw CheckpointError(
          ckpt_root + ": --resume auto found checkpoints but none verifies:" + why +
          "\nresume from a checkpoint of your own with --resume DIR, or move them away to start over");
    }
    start.warnings.insert(start.warnings.end(), ignored.begin(), ignored.end());
  } else if (!resume.empty()) {
    std::string lower = resume;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower == "auto") throw joule::UsageError("--resume " + resume + ": did you mean --resume auto (lower case)?");
    std::error_code ec;
    if (!fs::is_directory(resume, ec))
      throw CheckpointError(
          "--resume " + resume + (fs::exists(resume, ec) ? ": not a directory" : ": no such directory"),
          "give a checkpoint directory (RUN/checkpoints/step_NNNNNNNN) or --resume auto");
    if (!fs::exists(fs::path(resume) / "manifest.json") && fs::is_directory(fs::path(resume) / "checkpoints"))
      throw CheckpointError("--resume " + resume + ": a run directory, not a checkpoint",
                            "pass --run-dir " + resume + " --resume auto, or one of its checkpoints/step_NNNNNNNN");
    if (!fs::exists(fs::path(resume) / "manifest.json"))
      throw CheckpointError(
          "--resume " + resume +
              ": not a checkpoint (no manifest.json: another kind of directory, or a checkpoint whose "
              "write was cut short)",
          "give a checkpoint directory (RUN/checkpoints/step_NNNNNNNN) or --resume auto; a model "
          "directory such as final/ starts a new run with --model DIR");
    if (const std::string problem = verify_checkpoint(resume); !problem.empty())
      throw CheckpointError(resume + ": " + problem);
    start.checkpoint = resume;
  } else if (find_latest_checkpoint(ckpt_root, nullptr)) {
    throw RunConfigError(ckpt_root +
                         " already holds checkpoints: pass --resume auto to continue, or use another --run-dir");
  } else {
    // A fresh run never writes over another run's history or into a data set.
    std::error_code ec;
    const auto holds = [&](const fs::path& p) {  // a history with content (a link to /dev/full is not one)
      return p.filename() == "final" ? fs::is_directory(p, ec) : fs::is_regular_file(p, ec) && fs::file_size(p, ec) > 0;
    };
    for (const char* file : {"summary.json", "metrics.jsonl", "final", "metadata.json"})
      if (holds(fs::path(run_dir) / file))
        throw RunConfigError(run_dir + " already holds " +
                                 (std::string(file) == "metadata.json" ? "a data set (metadata.json)"
                                                                       : "another run's " + std::string(file)) +
                                 " and no checkpoint to resume: a new run there would mix with it",
                             "give --run-dir a new or empty directory");
  }
  if (start.checkpoint) {
    start.manifest_checksum = manifest_checksum(*start.checkpoint);
    const TrainerState state = read_checkpoint_state(*start.checkpoint);
    const std::string& gemm = state.fp32_gemm;
    if (!gemm.empty() && gemm != "blas" && gemm != "onednn" && gemm != "cuda")
      throw CheckpointError(*start.checkpoint + "/trainer_state.json: fp32_gemm is \"" + gemm +
                            "\", where joule writes \"blas\", \"onednn\" or \"cuda\"");
    // A bf16 run has no fp32 GEMMs; older joules recorded neither and ran fp32 on the BLAS alone.
    if (state.compute_precision.empty() || state.compute_precision == "fp32")
      start.fp32_gemm = gemm.empty() ? "blas" : gemm;
  }
  return start;
}

namespace {

// The newest complete checkpoint this rank lists (no checksums read): what it would have chosen on its own.
std::string own_view(const std::string& run_dir, const FaultPoints& faults) {
  std::vector<std::string> listed;
  for (const std::string& d : list_checkpoints((fs::path(run_dir) / "checkpoints").string()))
    if (fs::exists(fs::path(d) / "COMPLETE")) listed.push_back(d);
  if (faults.stale_checkpoint_view() && !listed.empty()) listed.erase(listed.begin());  // fault injection
  return listed.empty() ? "none" : listed.front();
}

}  // namespace

StartPoint choose_start(const std::string& run_dir, const std::string& resume, collectives::Communicator& comm,
                        const FaultPoints& faults) {
  const int rank = comm.info().rank;
  StartPoint start;
  if (rank == 0) start = choose_start_on_root(run_dir, resume);  // an error here ends the job on every rank (main)
  std::string dir = start.checkpoint.value_or("");
  collectives::broadcast_string(comm, dir, 0, 600, "the checkpoint to resume");
  collectives::broadcast_string(comm, start.manifest_checksum, 0, 600, "its manifest checksum");
  collectives::broadcast_string(comm, start.fp32_gemm, 0, 600, "its fp32 GEMM library");
  if (rank == 0 || dir.empty()) return start;
  start.checkpoint = dir;
  if (resume == "auto")
    if (const std::string mine = own_view(run_dir, faults); mine != dir)
      std::cerr << launch::rank_prefix() + "note: this rank lists " + mine +
                       " as the newest checkpoint; rank 0 chose " + dir +
                       " (a shared file system still propagating?): loading rank 0's choice\n"
                << std::flush;
  return start;
}

void keep_the_checkpoints_fp32_gemm(ResolvedRun& run, const StartPoint& start, collectives::Communicator& comm) {
  // Only a CPU library the checkpoint's fp32 steps ran, for fp32 steps here, and only where the config left it to auto.
  if (start.fp32_gemm != "blas" && start.fp32_gemm != "onednn") return;
  if (run.cfg.train.device == launch::DeviceKind::cuda || run.precision.precision != models::Precision::kFp32 ||
      run.cfg.train.fp32_gemm != launch::Fp32GemmSetting::automatic)
    return;
  const std::string timed = launch::fp32_gemm_name(run.gemm.choice.fp32);
  if (start.fp32_gemm == timed) return;
  // Every rank must run it (the BLAS always; oneDNN where its products agree with the BLAS's here): counted over
  // the ranks, so that all take the same branch.
  std::vector<double> cannot = {start.fp32_gemm == "blas" || launch::onednn_fp32_usable(run.gemm.rates) ? 0.0 : 1.0};
  collectives::sum_over_ranks(comm, cannot, run.cfg.train.collective_timeout_seconds,
                              "whether every rank runs the checkpoint's fp32 GEMM library");
  if (cannot[0] > 0)  // the timed choice stays, and the resume warns of the change with this reason
    run.gemm.choice.reason = "the checkpoint's oneDNN is not used: its products differ from the BLAS's on " +
                             format_number("%.0f", cannot[0]) + " rank(s); " + run.gemm.choice.reason;
  else
    run.gemm = with_fp32_gemm(run.gemm, start.fp32_gemm,
                              "the checkpoint's (" + *start.checkpoint +
                                  "): a resume keeps the library its run trained with, bit for bit; timing here "
                                  "chose " +
                                  timed,
                              "the checkpoint ran its", comm.info().rank);
  run.config_hash = run_config_hash(run);
  for (AutomaticValue& v : run.used)
    if (v.key == "train.fp32_gemm") v = used_fp32_gemm(run.gemm);
}

namespace {

// What differs between the config a checkpoint was trained with and the resumed run's, a line per key: a note when
// the change leaves the run the one its earlier steps belong to, a warning when it does not.
std::string config_change_lines(const TrainerState& loaded, const ResolvedRun& run, const std::string& checkpoint) {
  if (loaded.config_toml.empty())
    return "warning: resuming with a config that differs from the checkpoint's (" + checkpoint +
           " was written by an older joule, which did not record the config it was trained with)\n";
  std::string out;
  // What each run used, automatic keys filled in: "auto" then and the same value now is no change; the value auto gave
  // then and another one now is. A checkpoint of an older joule has only its config: its automatic keys are taken as
  // resolving as they do now.
  const RunConfig before =
      loaded.used_config_toml.empty()
          ? with_automatic_values(
                RunConfig::from_toml_text(loaded.config_toml, checkpoint + "/trainer_state.json \"config\""), run.used)
          : RunConfig::from_toml_text(loaded.used_config_toml, checkpoint + "/trainer_state.json \"used_config\"");
  for (const ConfigChange& c : config_changes(before, with_automatic_values(run.cfg, run.used)))
    out += std::string(c.safe ? "note" : "warning") + ": resuming with " + c.key + " = " + c.after +
           " (the checkpoint's: " + c.before + "): " + c.note + "\n";
  const std::string now = models::precision_name(run.precision.precision);
  if (!loaded.compute_precision.empty() && loaded.compute_precision != now)
    out += "warning: resuming in " + now + " a run trained in " + loaded.compute_precision + " (train.precision " +
           models::kPrecisionWords.at(static_cast<size_t>(run.cfg.train.precision)) +
           " resolves otherwise here): the arithmetic changes from here on\n";
  // fp32 Linear layers on another library: the same products in another summation order (bf16 runs have none). On a
  // GPU, which joules before the "cuda" record recorded as "blas", its own matmuls are the only ones.
  const std::string gemm_now = fp32_gemm_record(run);
  const std::string gemm_then = loaded.fp32_gemm.empty() ? "blas" : loaded.fp32_gemm;
  if (now == "fp32" && loaded.compute_precision == "fp32" && gemm_then != gemm_now && gemm_now != "cuda")
    out += "warning: resuming with fp32 GEMMs on " + gemm_now + " a run trained with them on " + gemm_then +
           " (train.fp32_gemm " + launch::kFp32GemmWords.at(static_cast<size_t>(run.cfg.train.fp32_gemm)) + "; " +
           run.gemm.choice.reason +
           "): the same products in another summation order from here on, so not bit for bit the run it continues\n";
  return out;
}

}  // namespace

TrainerState start_state(const ResolvedRun& run, const StartPoint& start, TrainingStack& objects,
                         collectives::Communicator& comm, bool accept_data_change) {
  const int rank = comm.info().rank;
  auto print_on_root = [&](const std::string& s) {
    if (rank == 0) std::cout << s << std::flush;
  };
  for (const auto& w : start.warnings) print_on_root("warning: " + w + "\n");
  TrainerState state;
  state.world_size = run.world;
  state.config_hash = run.config_hash;
  state.config_toml = run.resolved_toml;
  state.used_config_toml = used_config_toml(run.cfg, run.used);
  state.compute_precision = models::precision_name(run.precision.precision);
  state.fp32_gemm = fp32_gemm_record(run);
  const RunData data{run.dataset(), run.eval_set ? &*run.eval_set : nullptr};
  if (!start.checkpoint) {
    state.data_json = new_data_record(data);
    objects.reducer->broadcast_parameters(0);
    return state;
  }
  const TrainerState loaded =
      load_checkpoint(*start.checkpoint, objects.model, *objects.optimizer, rank, run.world, start.manifest_checksum);
  if (loaded.config_hash != run.config_hash) print_on_root(config_change_lines(loaded, run, *start.checkpoint));
  if (loaded.world_size != run.world)
    print_on_root("note: resuming on " + std::to_string(run.world) + " ranks a run saved on " +
                  std::to_string(loaded.world_size) + "\n");
  const ResumedData resumed =
      resume_data_record(loaded.data_json, *start.checkpoint, loaded.step, data, accept_data_change);
  for (const std::string& n : resumed.resume_notes) print_on_root("note: " + n + "\n");
  state = loaded;
  state.data_json = resumed.record;
  state.world_size = run.world;
  state.config_hash = run.config_hash;
  state.config_toml = run.resolved_toml;
  state.used_config_toml = used_config_toml(run.cfg, run.used);
  state.compute_precision = models::precision_name(run.precision.precision);
  state.fp32_gemm = fp32_gemm_record(run);
  state.segments = loaded.segments + 1;
  print_on_root("resumed from " + *start.checkpoint + " at step " + std::to_string(state.step) + "\n");
  return state;
}

}  // namespace joule::trainer
