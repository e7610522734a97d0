#include "trainer/sim/inference_sizing.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <tuple>

#include "launch/util/format.h"
#include "models/flops.h"

namespace joule::trainer {
namespace {

std::string describe_run(const std::string& model, int64_t seq_len, int64_t batch, const std::string& precision) {
  return model + ", seq " + std::to_string(seq_len) + ", batch " + std::to_string(batch) + ", " + precision;
}

// Scales a rate measured or published for `from` at `from_seq` to the workload by FLOPs per inference.
void scale_to(InferenceRate& r, const models::BertConfig& from, const std::string& from_name, int64_t from_seq,
              const InferenceWorkload& w, const std::string& unscaled_basis) {
  const double ratio = inference_flops(w.model, w.seq_len) / inference_flops(from, from_seq);
  const bool same_model = from_name == w.model_name;
  r.match = from_seq != w.seq_len ? 0 : (same_model || std::fabs(ratio - 1) < 1e-9) ? 2 : 1;
  if (r.match == 2) {
    r.basis = unscaled_basis + (same_model ? "" : " (" + from_name + ": the same FLOPs)");
    return;
  }
  r.inferences_per_s /= ratio;
  for (double* ms : {&r.p50_ms, &r.p95_ms, &r.p99_ms}) *ms *= ratio;
  r.basis = unscaled_basis + ", scaled by FLOPs x" + format_number("%.3g", 1 / ratio) + " from " + from_name + " seq " +
            std::to_string(from_seq);
}

}  // namespace

double inference_flops(const models::BertConfig& model, int64_t seq_len) {
  return models::total_flops(models::inference_gemms(model, 1, seq_len, 0, false));
}

InferenceRate rate_for(const InferenceFigure& f, const InferenceWorkload& w, const std::string& presets_dir) {
  InferenceRate r;
  r.ran = describe_run(f.published_as, f.seq_len, f.batch, f.precision);
  r.source = f.source;
  r.precision = f.precision;
  r.batch = f.batch;
  r.inferences_per_s = f.inferences_per_s;
  r.p50_ms = f.p50_ms;
  r.p95_ms = f.p95_ms;
  r.p99_ms = f.p99_ms;
  scale_to(r, models::load_config(f.model, presets_dir), f.model, f.seq_len, w, "published");
  return r;
}

InferenceRate measured_rate(const models::BertConfig& measured, const std::string& measured_name, int64_t seq_len,
                            InferenceRate r, const InferenceWorkload& w) {
  r.ran = describe_run(measured_name, seq_len, r.batch, r.precision);
  scale_to(r, measured, measured_name, seq_len, w, "measured on this host");
  return r;
}

FleetSizing size_fleet(const InstanceProfile& p, const std::vector<InferenceRate>& rates, const InferenceWorkload& w) {
  FleetSizing s;
  s.instance = p.name;
  s.description = p.description;
  // A known latency within the bound > an unknown one (the bound not checked) > out of bound (never sized on).
  auto rank = [&w](const InferenceRate& r) {
    if (w.p99_ms <= 0) return 2;
    if (r.tail_ms() <= 0) return 1;
    return r.tail_ms() <= w.p99_ms ? 2 : 0;
  };
  const InferenceRate* best = nullptr;
  for (const InferenceRate& r : rates) {
    if (rank(r) == 0) continue;
    if (!best || std::make_tuple(rank(r), r.match, r.inferences_per_s) >
                     std::make_tuple(rank(*best), best->match, best->inferences_per_s))
      best = &r;
  }
  if (!best) {
    double fastest = std::numeric_limits<double>::infinity();
    for (const InferenceRate& r : rates)
      if (r.tail_ms() > 0) fastest = std::min(fastest, r.tail_ms());
    s.note = rates.empty() ? "no inference figure for this instance"
                           : "no figure meets p99 <= " + format_number("%g", w.p99_ms) +
                                 " ms (the lowest: " + format_number("%.3g", fastest) + " ms)";
    return s;
  }
  s.sized = true;
  s.rate = *best;
  if (w.p99_ms > 0 && best->tail_ms() <= 0) s.note = "latency not published: the bound is not checked";
  if (w.p99_ms > 0 && best->p99_ms <= 0 && best->tail_ms() > 0)
    s.note = std::string("p99 not published: ") + best->tail_name() + " checked";
  const double per_s = w.rate_per_hour / 3600;
  s.instances = static_cast<int>(std::ceil(per_s * (1 + w.headroom) / best->inferences_per_s - 1e-9));
  s.instances = std::max(s.instances, 1);
  s.utilisation = per_s / (s.instances * best->inferences_per_s);
  s.instance_power_w = p.power_w(s.utilisation);
  s.usd_per_hour = s.instances * p.usd_per_hour;
  const double millions_per_hour = w.rate_per_hour / 1e6;
  s.usd_per_million = s.usd_per_hour / millions_per_hour;
  s.kwh_per_million = s.instances * s.instance_power_w * p.pue / 1000 / millions_per_hour;
  s.co2_kg_per_million = s.kwh_per_million * w.grid_g_per_kwh / 1000;
  return s;
}

}  // namespace joule::trainer
