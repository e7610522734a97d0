// `joule bench infer|model|comm|train|data`: throughput of each part on this machine, against what it allows.
#include <iostream>
#include <string>

#include "tools/bench_comm.h"
#include "tools/bench_data.h"
#include "tools/bench_infer.h"
#include "tools/bench_model.h"
#include "tools/bench_train.h"
#include "tools/cli/command.h"
#include "tools/cli/engine.h"
#include "tools/cli/flags.h"
#include "tools/model_commands.h"

namespace joule::cli {

int bench_infer(int argc, char** argv) {
  cxxopts::Options o(
      "joule bench infer",
      "inference throughput and p50/p99 latency of a BERT/LayoutLM classifier per batch size, with energy "
      "and cost per million inferences");
  add_path_flags(
      o, {{"model", "preset (bert-base, bert-large, layoutlm-base) or model directory", PathKind::input_model, "json",
           "", "bert-base"},
          {"out",
           "also write the result as an inference run, DIR/inference.json (`joule summary DIR`, `joule report DIR`, "
           "`joule plan --inference --measured DIR`)",
           PathKind::output_dir},
          {"profile",
           "write the timed calls of the one batch size as a Chrome trace (tools/bench/op_profile.py --steps CALLS "
           "sums it per op)",
           PathKind::output_file, "", "", ""}});
  o.add_options()("architecture",
                  "HuggingFace class (default: the directory's; a preset: its sequence or token classifier)",
                  cxxopts::value<std::string>()->default_value(""))(
      "batches", "batch sizes, comma-separated", cxxopts::value<std::string>()->default_value("1,2,4,8,16"))(
      "precision", "auto, fp32 or bf16", cxxopts::value<std::string>()->default_value("auto"))(
      "instance", "instance profile for the price (configs/hardware)",
      cxxopts::value<std::string>()->default_value("cpu-host"))("json", "one JSON line instead of the table")(
      "region", "grid region for CO2", cxxopts::value<std::string>()->default_value("world"))(
      "replace", "replace an --out that holds an inference run");
  const NumberFlag seq_len{"seq-len", "tokens per sequence", "128", kSeqLen};
  const NumberFlag labels{"labels", "a classifier's labels", "0", {0, 65536}, "0: the directory's id2label, else 2"};
  const NumberFlag threads{"threads", "intra-op threads", "0", kThreads, "0: every core"};
  const NumberFlag seconds{"seconds", "timed seconds per batch size", "2", {0.01, 3600}};
  const NumberFlag p99{"p99-ms", "latency bound: the best throughput whose p99 meets it", "0", {0, 1e6}, "0: none"};
  add_number_flags(o, {seq_len, labels, threads, seconds, p99});
  auto r = parse(o, argc, argv);
  check_replacing(r, "out", "an inference run (inference.json)");
  tools::InferBenchOptions io;
  io.model = r["model"].as<std::string>();
  io.architecture = r["architecture"].as<std::string>();
  io.precision = choice_flag<models::PrecisionSetting>(r, "precision", models::kPrecisionWords);
  io.instance = r["instance"].as<std::string>();
  io.region = r["region"].as<std::string>();
  io.seq_len = int_flag(r, seq_len);
  io.labels = int_flag(r, labels);
  io.threads = thread_flag(r, threads);
  io.seconds = number_flag(r, seconds);
  io.p99_ms = number_flag(r, p99);
  io.profile = r["profile"].as<std::string>();
  io.batches.clear();
  for (const std::string& item : split_commas(r["batches"].as<std::string>())) {
    size_t end = 0;
    long long b = -1;
    try {
      b = std::stoll(item, &end);
    } catch (const std::exception&) {
    }
    if (end != item.size() || b < 1) throw UsageError("--batches: '" + item + "' is not a positive batch size");
    io.batches.push_back(b);
  }
  const auto result = tools::bench_infer(io);
  std::cout << (r.count("json") ? result.to_json() + "\n" : result.to_text()) << std::flush;
  if (r.count("out")) {
    const std::string file = tools::write_inference_run(result, r["out"].as<std::string>());
    if (!r.count("json")) std::cout << "wrote " << file << "\n";
  }
  return 0;
}

int bench_model(int argc, char** argv) {
  cxxopts::Options o("joule bench model", "forward+backward throughput against this CPU's sgemm rate");
  add_path_flags(
      o, {{"config", "preset name, config.json or model directory", PathKind::input_model, "json", "", "bert-base"}});
  o.add_options()("precision", "auto, fp32 or bf16 (auto: bf16 where the CPU has AVX512-BF16 or AMX-BF16)",
                  cxxopts::value<std::string>()->default_value("auto"))("json", "print one JSON object")(
      "fp32-gemm", "auto, blas or onednn: the library fp32 GEMMs run on (as train.fp32_gemm)",
      cxxopts::value<std::string>()->default_value("auto"));
  const NumberFlag seq_len{"seq-len", "tokens per sequence", "128", kSeqLen},
      batch{"batch", "sequences per step", "8", kBatch},
      max_pred{"max-pred", "masked positions per sequence", "20", kPredictions},
      threads{"threads", "intra-op threads", "0", kThreads, "0: all cores"},
      iterations{"iterations", "timed steps", "6", kRepeats}, warmup{"warmup", "untimed steps first", "2", kWarmup};
  add_number_flags(o, {seq_len, batch, max_pred, threads, iterations, warmup});
  auto r = parse(o, argc, argv);
  tools::ModelBenchOptions b;
  b.config = tools::resolve_model_config(r["config"].as<std::string>());
  b.seq_len = int_flag(r, seq_len);
  b.batch = int_flag(r, batch);
  b.max_predictions = int_flag(r, max_pred);
  b.threads = thread_flag(r, threads);
  b.iterations = static_cast<int>(int_flag(r, iterations));
  b.warmup = static_cast<int>(int_flag(r, warmup));
  b.precision = choice_flag<models::PrecisionSetting>(r, "precision", models::kPrecisionWords);
  b.fp32_gemm = choice_flag<launch::Fp32GemmSetting>(r, "fp32-gemm", launch::kFp32GemmWords);
  std::string warning;
  tools::version_report(&warning, /*with_gemm_path=*/false);  // bench_model measures it
  if (!warning.empty()) std::cerr << warning;
  auto result = tools::bench_model(b);
  std::cout << (r.count("json") ? result.to_json() + "\n" : result.to_text(b));
  return 0;
}

int bench_train(int argc, char** argv) {
  cxxopts::Options o(
      "joule bench train",
      "the whole training step (dropout, bucketed all-reduce, LAMB) on synthetic batches; run under mpirun");
  add_path_flags(
      o, {{"config", "model preset, config.json or model directory", PathKind::input_model, "json", "", "bert-base"},
          {"profile", "write rank 0's timed steps as a Chrome trace (tools/bench/op_profile.py sums it per op)",
           PathKind::output_file, "", "", ""}});
  o.add_options()("precision", "auto, fp32 or bf16 (auto: bf16 where the CPU has AVX512-BF16 or AMX-BF16)",
                  cxxopts::value<std::string>()->default_value("auto"))(
      "wire", "all-reduce buffer dtype: fp32 or bf16 (gradients stay fp32; bf16 halves the bytes sent)",
      cxxopts::value<std::string>()->default_value("fp32"))("device", "cpu or cuda (one GPU per rank)",
                                                            cxxopts::value<std::string>()->default_value("cpu"))(
      "fp32-gemm", "auto, blas or onednn: the library fp32 GEMMs run on (train.fp32_gemm)",
      cxxopts::value<std::string>()->default_value("auto"))(
      "shard", "none or zero1: the optimizer state whole on every rank or split over the ranks (optimizer.shard)",
      cxxopts::value<std::string>()->default_value("none"));
  const NumberFlag seq_len{"seq-len", "sequence length", "128", kSeqLen},
      micro_batch{"micro-batch", "sequences per rank per step", "8", kBatch},
      max_pred{"max-predictions", "masked positions per sequence", "20", kPredictions},
      threads{"threads", "intra-op threads per rank", "0", kThreads, "0: cores / local ranks"},
      warmup{"warmup", "untimed steps", "2", kWarmup}, steps{"steps", "timed steps", "5", kRepeats},
      peak{"peak-tflops", "the device's dense peak TFLOP/s at --precision: adds \"mfu\" (H100/H200 SXM bf16: 989)", "0",
           OptionRange{0, 1e6}, "0: none"};
  add_number_flags(o, {seq_len, micro_batch, max_pred, threads, warmup, steps, peak});
  auto r = parse(o, argc, argv);
  tools::TrainBenchOptions b;
  // cpu and cuda only (trainium-sim is a run's simulated cluster): DeviceKind's first two words.
  b.device = choice_flag<launch::DeviceKind>(r, "device", {"cpu", "cuda"});
  b.peak_tflops = number_flag(r, peak);
  b.profile = r["profile"].as<std::string>();
  b.model_name = r["config"].as<std::string>();
  b.config = tools::resolve_model_config(b.model_name);
  b.seq_len = int_flag(r, seq_len);
  b.micro_batch = int_flag(r, micro_batch);
  b.max_predictions = int_flag(r, max_pred);
  b.threads = thread_flag(r, threads);
  b.warmup = static_cast<int>(int_flag(r, warmup));
  b.steps = static_cast<int>(int_flag(r, steps));
  b.precision = choice_flag<models::PrecisionSetting>(r, "precision", models::kPrecisionWords);
  b.wire = r["wire"].as<std::string>();
  b.fp32_gemm = choice_flag<launch::Fp32GemmSetting>(r, "fp32-gemm", launch::kFp32GemmWords);
  b.shard = choice_flag<trainer::OptimizerSharding>(r, "shard", trainer::kExplicitShardingWords);
  const std::string line = tools::bench_train(b);
  if (!line.empty()) std::cout << line << std::endl;
  return 0;
}

int bench_comm(int argc, char** argv) {
  cxxopts::Options o("joule bench comm",
                     "all-reduce busbw table and the bucketed reducer vs one all-reduce (run under mpirun)");
  o.add_options()("gradient-model", "model whose gradient the reducer moves (none: skip that part)",
                  cxxopts::value<std::string>()->default_value("bert-large"))(
      "pingpong", "first a rank 0 <-> rank 1 ping-pong: one-way times, and the alpha and beta they fit")(
      "overlap-model", "measure exposed communication in training steps of this model",
      cxxopts::value<std::string>()->default_value(""))("json", "JSON lines: one per table row, then a summary");
  const OptionRange message{4, 1e12};  // one float to a terabyte
  const NumberFlag min_bytes{"min-bytes", "smallest message", "1024", message},
      max_bytes{"max-bytes", "largest message", "268435456", message},
      iterations{"iterations", "timed repetitions per size", "5", kRepeats},
      alpha{"predict-alpha-us", "with --predict-mbps: each row's ring all-reduce time from the alpha-beta model", "0",
            OptionRange{0, 1e9}},
      mbps{"predict-mbps", "link bandwidth for the prediction, MB/s", "0", OptionRange{0, 1e9}, "0: no prediction"},
      overlap_batch{"overlap-batch", "sequences per rank in those steps", "8", kBatch},
      min_busbw{"min-busbw", "fail below this busbw (GB/s) at the largest size", "0", OptionRange{0, 1e6}, "0: none"};
  add_number_flags(o, {min_bytes, max_bytes, iterations, alpha, mbps, overlap_batch, min_busbw});
  auto r = parse(o, argc, argv);
  tools::CommBenchOptions b;
  b.min_bytes = int_flag(r, min_bytes);
  b.max_bytes = int_flag(r, max_bytes);
  if (b.min_bytes > b.max_bytes)
    throw UsageError("--min-bytes " + std::to_string(b.min_bytes) + " is larger than --max-bytes " +
                     std::to_string(b.max_bytes));
  b.iterations = static_cast<int>(int_flag(r, iterations));
  b.gradient_model = r["gradient-model"].as<std::string>();
  b.overlap_model = r["overlap-model"].as<std::string>();
  b.overlap_batch = static_cast<int>(int_flag(r, overlap_batch));
  b.min_busbw = number_flag(r, min_busbw);
  b.json = r.count("json") > 0;
  b.pingpong = r.count("pingpong") > 0;
  b.predict_alpha_s = number_flag(r, alpha) * 1e-6;
  b.predict_bytes_per_s = number_flag(r, mbps) * 1e6;
  return tools::bench_comm(b);
}

int bench_data(int argc, char** argv) {
  cxxopts::Options o("joule bench data", "sequences/s the loader delivers to one rank under the global shuffle");
  add_path_flags(o, {{"data", "shard directory, glob, list file or shard", PathKind::input_path}});
  o.add_options()("json", "print one JSON object");
  const NumberFlag micro_batch{"micro-batch", "sequences per batch", "32", kBatch},
      global_batch{"global-batch", "sequences per optimizer step, all ranks", "0", OptionRange{0, 1e9},
                   "0: micro-batch x world size"},
      world_size{"world-size", "ranks the steps are split over", "1", OptionRange{1, 1e6}},
      rank{"rank", "the rank whose part is read", "0", OptionRange{0, 1e6}},
      batches{"batches", "timed batches", "200", kRepeats}, warmup{"warmup", "untimed batches first", "10", kWarmup};
  add_number_flags(o, {micro_batch, global_batch, world_size, rank, batches, warmup});
  auto r = parse(o, argc, argv);
  tools::BenchDataOptions b;
  b.data = required(r, "data");
  b.micro_batch = int_flag(r, micro_batch);
  b.global_batch = int_flag(r, global_batch);
  b.world_size = static_cast<int>(int_flag(r, world_size));
  b.rank = static_cast<int>(int_flag(r, rank));
  b.batches = static_cast<int>(int_flag(r, batches));
  b.warmup = static_cast<int>(int_flag(r, warmup));
  b.json = r.count("json") > 0;
  std::cout << tools::bench_data(b);
  return 0;
}

}  // namespace joule::cli
