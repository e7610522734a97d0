// The cluster performance model: the time of one data-parallel BERT training step on N instances of a profile,
// and from it seq/hour, hours, kWh, USD and CO2 for a workload.
//   compute: the step's GEMM FLOPs (models/flops.h, attention included) over the device's peak for the dtype x
//            an efficiency calibrated on the profile's single-node published figure (never a multi-node one);
//   communication: every gradient bucket, in the order and sizes the reducer uses, through the hierarchical
//            all-reduce's α-β model (trainer/sim/alpha_beta.h) with the profile's links;
//   overlap: a bucket's all-reduce starts when backward has produced its gradients (and the previous bucket is
//            done), as the reducer schedules them; only the last micro-batch of an accumulation communicates;
//   other: the optimizer step (memory-bound: bytes touched per parameter over device memory bandwidth).
//   ZeRO-1 (Workload::zero1): every bucket reduce-scattered instead of all-reduced (overlapped alike), each device
//            updates 1/N of the parameters, and the weights are all-gathered after the update, not overlapped (as
//            joule's trainer does it): in a 16-bit dtype the Linear weights in it, from fp32 master shards.
// No LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "models/bert_config.h"
#include "trainer/cost/hardware.h"
#include "trainer/sim/alpha_beta.h"

namespace joule::sim {

struct Workload {
  models::BertConfig model;
  int64_t seq_len = 128;
  int64_t max_predictions = 20;
  int64_t global_batch = 65536;
  int64_t micro_batch = 32;    // per device per forward/backward
  double sequences = 450e6;    // the run's target
  std::string dtype = "bf16";  // compute dtype (peak_tflops key); gradients travel in it too
  bool zero1 = false;          // optimizer.shard = zero1: reduce-scatter, 1/N of the update, all-gather of weights
  // Packed rows (data/pack.h): the sequences a row holds on average. A step still trains global_batch sequences, in
  // global_batch / sequences_per_row rows of seq_len tokens (a row costs what a padded sequence costs).
  double sequences_per_row = 1.0;
};

struct StepPrediction {
  std::string instance;
  int nodes = 0, devices = 0;  // devices in all
  int64_t accumulation = 1;    // micro-batches per device per step
  double forward_s = 0, backward_s = 0, compute_s = 0;
  double comm_s = 0;          // all bucket all-reduces (zero1: reduce-scatters, then the weights' all-gathers)
  double exposed_comm_s = 0;  // not hidden by the last backward (zero1: the all-gathers, after the update, too)
  double optimizer_s = 0;     // "other"
  // Model state per device: weights (zero1 in a 16-bit dtype: the Linear weights in it and their fp32 master 1/N),
  // fp32 gradients, LAMB's two fp32 moments (1/N of them with zero1), and in a 16-bit compute dtype the per-step
  // copies of the weights not held in it; activations not included.
  double state_bytes_per_device = 0;
  double step_s = 0;
  double seq_per_s = 0, seq_per_hour = 0;
  double hours = 0, kwh = 0, usd = 0, co2_kg = 0;  // for workload.sequences
  double node_power_w = 0;
  std::vector<double> bucket_bytes;  // as communicated
};

// NVIDIA's masked positions for a sequence length: 20 at 128, 80 at 512.
int64_t default_max_predictions(int64_t seq_len);

class ClusterModel {
 public:
  // Calibrates the compute efficiency on the profile's [calibration] figure (published single-node seq/s, solved
  // through this same model) or takes its assumed MFU. `presets_dir`: configs/models.
  ClusterModel(cost::InstanceProfile profile, const std::string& presets_dir);

  // One step on `nodes` instances, with the reducer's gradient buckets (planned_buckets).
  StepPrediction predict(const Workload& workload, int nodes, double grid_g_per_kwh = 475.0,
                         int devices_per_node = 0) const;

  double efficiency() const { return efficiency_; }  // at the calibration's sequence length
  // At `seq_len`: the calibration's, or with a long-sequence figure, interpolated in log(seq_len) between the two
  // calibrated lengths (clamped beyond them).
  double efficiency(int64_t seq_len) const;
  const std::string& efficiency_basis() const { return basis_; }
  const cost::InstanceProfile& profile() const { return profile_; }

 private:
  StepPrediction predict_with(double efficiency, const Workload& w, int nodes, double grid_g_per_kwh,
                              int devices_per_node) const;
  double calibrate(const models::BertConfig& model, int64_t seq_len, int64_t global_batch, double seq_per_s) const;
  cost::InstanceProfile profile_;
  double efficiency_ = 0, long_efficiency_ = 0;
  int64_t seq_len_ = 0, long_seq_len_ = 0;  // the calibrated lengths (0: none)
  std::string basis_;
};

// The links of `nodes` instances of a profile (bandwidths x the profile's efficiencies).
Topology cluster_topology(const cost::InstanceProfile& profile, int nodes, int devices_per_node);

// The reducer's buckets for a workload (collectives::plan_buckets with its 25 MB / 1 MB caps; with zero1 in bf16 the
// Linear weights in buckets of their own), as indices into models::parameter_numels, in launch order.
std::vector<std::vector<size_t>> planned_buckets(const Workload& workload);
// The model's bucket sizes (fp32 bytes) with those caps, in launch order (one kind of parameter).
std::vector<double> planned_bucket_bytes(const models::BertConfig& model);

}  // namespace joule::sim
