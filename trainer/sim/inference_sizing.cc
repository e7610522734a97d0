#include "trainer/sim/inference_sizing.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <tuple>

#include "launch/util/error.h"
#include "launch/util/format.h"
#include "models/flops.h"

namespace joule::sim {
namespace {

std::string describe_run(const std::string& model, int64_t seq_len, int64_t batch, const std::string& precision) {
  return model + ", seq " + std::to_string(seq_len) + ", batch " + std::to_string(batch) + ", " + precision;
}

// The same encoder shape (layers, width, heads, feed-forward): LayoutLM-base is BERT-base's.
bool same_encoder(const models::BertConfig& a, const models::BertConfig& b) {
  return a.num_hidden_layers == b.num_hidden_layers && a.hidden_size == b.hidden_size &&
         a.num_attention_heads == b.num_attention_heads && a.intermediate_size == b.intermediate_size;
}

// Scales a rate measured or published for `from` at `from_seq` to the workload by FLOPs per inference.
void scale_to(InferenceRate& r, const models::BertConfig& from, const std::string& from_name, int64_t from_seq,
              const InferenceWorkload& w, const std::string& unscaled_basis) {
  if (from_seq < 1 || from_seq > from.max_position_embeddings)
    throw joule::Error(r.ran + ": sequence length " + std::to_string(from_seq) + " is outside " + from_name + "'s 1.." +
                           std::to_string(from.max_position_embeddings) + " positions",
                       "fix the figure's seq_len (or the measurement's)");
  const double ratio = inference_flops(w.model, w.seq_len) / inference_flops(from, from_seq);
  const bool same_shape = same_encoder(from, w.model), same_seq = from_seq == w.seq_len;
  r.match = same_seq && same_shape ? 3 : same_seq ? 2 : same_shape ? 1 : 0;
  if (r.match == 3) {
    r.basis = unscaled_basis + (from_name == w.model_name ? "" : " (" + from_name + ": the same encoder)");
    return;
  }
  r.inferences_per_s /= ratio;
  for (double* ms : {&r.p50_ms, &r.p95_ms, &r.p99_ms}) *ms *= ratio;
  r.basis = unscaled_basis + ", scaled by FLOPs x" + format_number("%.3g", 1 / ratio) + " from " + from_name + " seq " +
            std::to_string(from_seq);
}

}  // namespace

std::string inference_profile_dir(const std::string& config_dir) {
  return (std::filesystem::path(config_dir) / "hardware" / "inference").string();
}

double inference_flops(const models::BertConfig& model, int64_t seq_len) {
  return models::total_flops(models::inference_gemms(model, 1, seq_len, 0, false));
}

InferenceRate rate_for(const cost::InferenceFigure& f, const InferenceWorkload& w, const std::string& presets_dir) {
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

std::vector<InferenceRate> published_rates(const cost::InstanceProfile& profile, const InferenceWorkload& w,
                                           const std::string& presets_dir) {
  std::vector<InferenceRate> rates;
  for (const cost::InferenceFigure& f : profile.inference) {
    try {
      rates.push_back(rate_for(f, w, presets_dir));
    } catch (const joule::Error& e) {
      throw cost::ProfileError(profile.file + ": " + e.what());
    }
  }
  return rates;
}

InferenceRate measured_rate(const models::BertConfig& measured, const std::string& measured_name, int64_t seq_len,
                            InferenceRate r, const InferenceWorkload& w, const std::string& where) {
  r.ran = describe_run(measured_name, seq_len, r.batch, r.precision);
  scale_to(r, measured, measured_name, seq_len, w, "measured " + where);
  return r;
}

FleetSizing size_fleet(const cost::InstanceProfile& p, const std::vector<InferenceRate>& rates,
                       const InferenceWorkload& w) {
  FleetSizing s;
  s.instance = p.name;
  s.description = p.description;
  // A known latency within the bound > an unknown one (the bound not checked) > out of bound (never sized on). A
  // call of `batch` inferences lasts at least batch / throughput (one stream; parallel streams only lengthen it): a
  // figure without a published latency whose bound already breaks the bound is out too.
  auto rank = [&w](const InferenceRate& r) {
    if (w.p99_ms <= 0) return 2;
    if (r.tail_ms() <= 0) return r.min_call_ms() <= w.p99_ms ? 1 : 0;
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
    for (const InferenceRate& r : rates) fastest = std::min(fastest, r.tail_ms() > 0 ? r.tail_ms() : r.min_call_ms());
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
  const double needed = std::ceil(per_s * (1 + w.headroom) / best->inferences_per_s - 1e-9);
  if (!(needed <= kMaxInstances)) {  // also NaN
    s.sized = false;
    s.note = "needs more than " + format_number("%.0f", kMaxInstances) + " instances";
    return s;
  }
  s.instances = std::max<int64_t>(static_cast<int64_t>(needed), 1);
  s.utilisation = per_s / (static_cast<double>(s.instances) * best->inferences_per_s);
  s.instance_power_w = p.power_w(s.utilisation);
  s.usd_per_hour = static_cast<double>(s.instances) * p.usd_per_hour;
  const double millions_per_hour = w.rate_per_hour / 1e6;
  s.usd_per_million = s.usd_per_hour / millions_per_hour;
  s.kwh_per_million = static_cast<double>(s.instances) * s.instance_power_w * p.pue / 1000 / millions_per_hour;
  s.co2_kg_per_million = s.kwh_per_million * w.grid_g_per_kwh / 1000;
  return s;
}

}  // namespace joule::sim
