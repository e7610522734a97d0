// The [train] and [run] sections of the run config: what `joule train` trains (steps or sequences, batch
// arithmetic, precision, device) and where it writes. Owned by the trainer; composed into the run's config by
// trainer/run_config.h. No LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "launch/blas_core.h"
#include "launch/device_kind.h"
#include "launch/util/options.h"
#include "models/precision.h"

namespace joule::trainer {

// How `joule train` shows progress: "auto": a live status line when a single process writes to a terminal, else a
// plain line per interval (under mpirun every rank gets a pseudo-terminal, so it cannot tell); "bar"; "lines".
enum class ProgressMode { automatic, bar, lines };
inline const std::vector<std::string> kProgressWords = {"auto", "bar", "lines"};  // ProgressMode's order

struct TrainOptions {
  static constexpr const char* kTable = "train";
  int64_t steps = 0;             // optimizer steps; 0: derived from target_sequences
  int64_t target_sequences = 0;  // sequences to train on (450e6 for a full BERT phase-1 pretraining)
  int64_t micro_batch = 8;       // sequences per rank per forward/backward
  int64_t accumulation = 1;      // micro-batches per rank per optimizer step
  int64_t global_batch = 0;      // 0: micro_batch x accumulation x world size; else accumulation follows
  int64_t seq_len = 0;           // 0: the shards' sequence length (must match when set)
  int64_t threads = 0;           // intra-op threads per rank; 0: cores / local ranks
  int64_t seed = 42;
  int64_t log_every_steps = 10;
  int64_t throughput_warmup_steps = 2;  // excluded from the throughput figures
  int64_t max_nonfinite_steps = 10;     // consecutive steps with NaN/Inf gradients (each skipped) before the run stops
  double loss_spike_factor = 2;         // a step's loss above this x its running mean is logged (0: off)
  double collective_timeout_seconds =
      600;  // a collective not done by then fails and aborts the job (a dead or stalled rank)
  // auto: bf16 mixed precision where matmuls run it natively (models/precision.h)
  models::PrecisionSetting precision = models::PrecisionSetting::automatic;
  // The library fp32 GEMMs run on, on a CPU (launch/blas_core.h); auto takes oneDNN where the BLAS's kernels are below
  // the processor and oneDNN's agree and run faster (measured at start-up).
  launch::Fp32GemmSetting fp32_gemm = launch::Fp32GemmSetting::automatic;
  // cpu, cuda (one GPU per rank) or trainium-sim (CPU numerics + [sim]'s cluster's clock)
  launch::DeviceKind device = launch::DeviceKind::cpu;
  ProgressMode progress = ProgressMode::automatic;

  std::vector<OptionField> fields();
  void validate() const;  // ranges and the checks that need neither the world size nor the data
};

struct RunOptions {
  static constexpr const char* kTable = "run";
  std::string dir = "runs/run";

  std::vector<OptionField> fields();
  void validate() const {}
};

}  // namespace joule::trainer
