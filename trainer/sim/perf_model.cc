#include "trainer/sim/perf_model.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>

#include "collectives/buckets.h"
#include "models/flops.h"
#include "trainer/sim/alpha_beta.h"

namespace joule::sim {
namespace fs = std::filesystem;
namespace {

constexpr double kOptimizerBytesPerParameter = 40;  // LAMB: param, grad, m, v read/written + update (fp32)

double dtype_bytes(const std::string& dtype) { return dtype == "fp32" || dtype == "tf32" ? 4 : 2; }

}  // namespace

int64_t default_max_predictions(int64_t seq_len) { return (seq_len * 5 + 16) / 32; }

Topology cluster_topology(const cost::InstanceProfile& p, int nodes, int devices_per_node) {
  Topology t;
  t.nodes = nodes;
  t.devices_per_node = devices_per_node;
  t.intra = {p.intra_node_latency_us * 1e-6, p.intra_node_gb_per_s * 1e9 * p.intra_node_efficiency};
  t.inter = {p.inter_node_latency_us * 1e-6, p.inter_node_gb_per_s * 1e9 * p.inter_node_efficiency};
  return t;
}

namespace {

// ZeRO-1 in bf16 holds the Linear weights in bf16 between steps, from fp32 master shards (collectives/reducer.h).
bool holds_bf16_weights(const Workload& w) { return w.zero1 && w.dtype == "bf16"; }

}  // namespace

std::vector<std::vector<size_t>> planned_buckets(const Workload& w) {
  std::vector<int64_t> bytes;
  std::vector<int> kinds;
  for (const auto& [name, numel] : models::parameter_numels(w.model)) {
    bytes.push_back(numel * 4);
    kinds.push_back(holds_bf16_weights(w) && models::is_matmul_weight(name) ? 1 : 0);
  }
  return collectives::plan_buckets(bytes, 25u << 20, 1u << 20, kinds);
}

std::vector<double> planned_bucket_bytes(const models::BertConfig& model) {
  Workload w;
  w.model = model;
  const auto params = models::parameter_numels(model);
  std::vector<double> out;
  for (const auto& group : planned_buckets(w)) {
    double b = 0;
    for (size_t k : group) b += static_cast<double>(params[k].second) * 4;
    out.push_back(b);
  }
  return out;
}

ClusterModel::ClusterModel(cost::InstanceProfile profile, const std::string& presets_dir)
    : profile_(std::move(profile)) {
  const cost::InstanceProfile& p = profile_;
  if (!p.calibration_borrow.empty()) {
    // Another profile's efficiencies, computed from its published figure with this same model and FLOP convention.
    const cost::InstanceProfile lender =
        cost::load_instance_profile(p.calibration_borrow, fs::path(p.file).parent_path().string());
    if (!lender.calibration_borrow.empty())
      throw cost::ProfileError(p.file + ": calibration.borrow names " + lender.name +
                               ", which borrows too; name a profile with its own figure");
    const ClusterModel from(lender, presets_dir);
    efficiency_ = from.efficiency_, long_efficiency_ = from.long_efficiency_;
    seq_len_ = from.seq_len_, long_seq_len_ = from.long_seq_len_;
    basis_ = "borrowed from " + lender.name + ": " + from.basis_;
    return;
  }
  if (p.calibration_seq_per_s > 0) {
    seq_len_ = p.calibration_seq_len;
    efficiency_ = calibrate(models::load_config(p.calibration_model, presets_dir), p.calibration_seq_len,
                            p.calibration_global_batch, p.calibration_seq_per_s);
    char buf[256];
    std::snprintf(buf, sizeof buf, "calibrated on %.1f seq/s (%s, seq %lld, %d device(s), %s)", p.calibration_seq_per_s,
                  p.calibration_model.c_str(), static_cast<long long>(p.calibration_seq_len), p.calibration_devices,
                  (p.calibration_dtype.empty() ? "bf16" : p.calibration_dtype).c_str());
    basis_ = buf;
    if (p.calibration_long_seq_per_s > 0) {
      long_seq_len_ = p.calibration_long_seq_len;
      long_efficiency_ = calibrate(models::load_config(p.calibration_model, presets_dir), p.calibration_long_seq_len,
                                   p.calibration_long_global_batch, p.calibration_long_seq_per_s);
      std::snprintf(buf, sizeof buf, "; %.1f seq/s at seq %lld", p.calibration_long_seq_per_s,
                    static_cast<long long>(long_seq_len_));
      basis_ += buf;
    }
  } else if (p.calibration_mfu > 0) {
    efficiency_ = p.calibration_mfu;
    basis_ = "assumed MFU " + std::to_string(p.calibration_mfu).substr(0, 4);
  } else {
    throw cost::ProfileError(
        p.file + ": no [calibration] seq_per_s, borrow or mfu: the performance model cannot set a compute efficiency",
        "give the profile a [calibration] (a measured seq_per_s, or an mfu), or choose a calibrated instance with "
        "--instance; this host's own speed is measured, not predicted: `joule bench train` or `joule train`");
  }
}

double ClusterModel::calibrate(const models::BertConfig& model, int64_t seq_len, int64_t global_batch,
                               double seq_per_s) const {
  const cost::InstanceProfile& p = profile_;
  Workload cal;
  cal.model = model;
  cal.seq_len = seq_len;
  cal.max_predictions = default_max_predictions(seq_len);
  cal.global_batch = global_batch > 0 ? global_batch : 65536;
  cal.micro_batch = 32;
  cal.dtype = p.calibration_dtype.empty() ? "bf16" : p.calibration_dtype;
  // The efficiency at which this model reproduces the published single-node figure (bisection: seq/s grows with
  // the efficiency).
  double lo = 1e-4, hi = 1.0;
  for (int i = 0; i < 60; ++i) {
    const double mid = 0.5 * (lo + hi);
    (predict_with(mid, cal, 1, 0, p.calibration_devices).seq_per_s < seq_per_s ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

double ClusterModel::efficiency(int64_t seq_len) const {
  if (long_seq_len_ <= 0 || seq_len <= seq_len_) return efficiency_;
  if (seq_len >= long_seq_len_) return long_efficiency_;
  const double t =
      std::log(static_cast<double>(seq_len) / seq_len_) / std::log(static_cast<double>(long_seq_len_) / seq_len_);
  return efficiency_ + t * (long_efficiency_ - efficiency_);
}

StepPrediction ClusterModel::predict(const Workload& w, int nodes, double grid_g_per_kwh, int devices_per_node) const {
  return predict_with(efficiency(w.seq_len), w, nodes, grid_g_per_kwh, devices_per_node);
}

StepPrediction ClusterModel::predict_with(double efficiency, const Workload& w, int nodes, double grid_g_per_kwh,
                                          int devices_per_node) const {
  const cost::InstanceProfile& p = profile_;
  if (nodes < 1) throw cost::ProfileError("performance model: nodes must be >= 1");
  const int per_node = devices_per_node > 0 ? devices_per_node : std::max(1, p.devices);
  StepPrediction r;
  r.instance = p.name;
  r.nodes = nodes;
  r.devices = nodes * per_node;
  // Each device takes global_batch / devices sequences per step, in rows of up to sequences_per_row sequences.
  const double rows = static_cast<double>(w.global_batch) / w.sequences_per_row;
  if (rows < r.devices)  // the request, not the profile: a usage error (exit 2)
    throw joule::UsageError(
        "performance model: the global batch of " + std::to_string(w.global_batch) + " sequences is smaller than the " +
            std::to_string(r.devices) + " devices of " + std::to_string(nodes) + " x " + p.name +
            ": every device needs at least one sequence a step",
        "raise the global batch (plan --global-batch, train.global_batch) or use fewer nodes (--nodes, --scaling)");
  // ... in micro-batches of micro_batch rows.
  const double per_device = rows / r.devices;
  const double micro = std::min<double>(static_cast<double>(w.micro_batch), per_device);
  r.accumulation = static_cast<int64_t>(std::ceil(per_device / micro));

  const double device_peak = p.instance_peak_tflops(w.dtype, /*devices_in_use=*/1) * 1e12;
  const double rate = device_peak * efficiency;
  const double flops_per_row = models::training_flops_per_sequence(w.model, w.seq_len, w.max_predictions);
  r.compute_s = per_device * flops_per_row / rate;
  r.forward_s = r.compute_s / 3;  // forward GEMMs are a third of the step's (input and weight gradients the rest)
  r.backward_s = r.compute_s - r.forward_s;
  const double last_backward_s = r.backward_s * micro / per_device;

  // Gradient buckets on the wire in the compute dtype, timed by the hierarchical all-reduce.
  const Topology topo = cluster_topology(p, nodes, per_node);
  const auto params = models::parameter_numels(w.model);
  // A bucket is ready when backward has passed its parameters: the share of the backward FLOPs done by then,
  // approximated by the share of non-embedding parameters from the last one back to the bucket's first (the last its
  // backward produces); the embeddings' gradients come last.
  std::vector<double> dense_from(params.size() + 1, 0.0);  // non-embedding elements of parameters k..end
  for (size_t k = params.size(); k-- > 0;)
    dense_from[k] =
        dense_from[k + 1] +
        (params[k].first.find("embeddings") == std::string::npos ? static_cast<double>(params[k].second) : 0);
  const double dense_total = dense_from[0];
  std::vector<double> bucket_bytes, ready_fraction;
  for (const auto& group : planned_buckets(w)) {
    double bytes = 0;
    size_t first = params.size();
    for (size_t k : group) {
      bytes += static_cast<double>(params[k].second) * 4;
      first = std::min(first, k);
    }
    bucket_bytes.push_back(bytes);
    ready_fraction.push_back(dense_total > 0 ? dense_from[first] / dense_total : 1.0);
  }
  if (!ready_fraction.empty()) ready_fraction.back() = 1.0;
  // ZeRO-1 in bf16 holds the Linear weights in it between steps (from fp32 master shards): they are all-gathered in
  // bf16, the other parameters in fp32.
  const double d = dtype_bytes(w.dtype);
  double parameters = 0, held = 0;  // held: parameters held in bf16
  for (const auto& [name, numel] : params) {
    parameters += static_cast<double>(numel);
    if (holds_bf16_weights(w) && models::is_matmul_weight(name)) held += static_cast<double>(numel);
  }
  const double gathered_per_fp32_byte = (4 * (parameters - held) + d * held) / (4 * parameters);
  double clock = 0, gather_s = 0;  // from the start of the last backward
  for (size_t b = 0; b < bucket_bytes.size(); ++b) {
    const double wire = bucket_bytes[b] / 4 * d;
    r.bucket_bytes.push_back(wire);
    const double t =
        w.zero1 ? hierarchical_reduce_scatter_seconds(topo, wire) : hierarchical_all_reduce(topo, wire).total_s();
    clock = std::max(clock, ready_fraction[b] * last_backward_s) + t;
    r.comm_s += t;
    if (w.zero1) gather_s += hierarchical_reduce_scatter_seconds(topo, bucket_bytes[b] * gathered_per_fp32_byte);
  }
  r.exposed_comm_s = std::max(0.0, clock - last_backward_s) + gather_s;
  r.comm_s += gather_s;
  const double memory_bw = p.device_memory_gb_per_s > 0 ? p.device_memory_gb_per_s * 1e9 * 0.7 : 1e11;
  const double shards = w.zero1 ? r.devices : 1;
  r.optimizer_s = parameters / shards * kOptimizerBytesPerParameter / memory_bw;
  // Weights (fp32; the held ones in the 16-bit dtype plus their 1/N fp32 master), fp32 gradients, two fp32 moments
  // (1/N with zero1), and in a 16-bit dtype the per-step copies of the weights not held in it.
  r.state_bytes_per_device = 4 * (parameters - held) + (d + 4 / shards) * held + 4 * parameters +
                             8 * parameters / shards + (d < 4 ? d * (parameters - held) : 0);
  r.step_s = r.compute_s + r.exposed_comm_s + r.optimizer_s;
  r.seq_per_s = static_cast<double>(w.global_batch) / r.step_s;
  r.seq_per_hour = r.seq_per_s * 3600;
  r.hours = w.sequences / r.seq_per_s / 3600;
  // Power of a node while training: devices between idle and maximum by their compute share, the host at a
  // light load, RAM constant.
  const double busy = r.compute_s / r.step_s;
  r.node_power_w = p.power_w(busy, per_node);
  r.kwh = r.hours * nodes * r.node_power_w / 1000 * p.pue;
  r.usd = r.hours * nodes * p.usd_per_hour;
  r.co2_kg = r.kwh * grid_g_per_kwh / 1000;
  return r;
}

}  // namespace joule::sim
