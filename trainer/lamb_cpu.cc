#include "trainer/lamb_cpu.h"

#include <cmath>

#include "models/cpu_vector.h"

namespace joule::trainer::lamb_cpu {
namespace {

// Independent accumulators: a single double sum would be bound by the add latency, not by memory.
constexpr int kLanes = 8;

JOULE_LANES_INLINE float moments(float g, float& m, float& v, const Hyperparameters& h) {
  g *= h.grad_scale;
  m = h.beta1 * m + h.one_minus_beta1 * g;
  v = h.beta2 * v + h.one_minus_beta2 * (g * g);
  return g;
}

JOULE_LANES_INLINE float direction(float m, float v, float p, const Hyperparameters& h) {
  return (m / h.c1) / (std::sqrt(v / h.c2) + h.eps) + h.weight_decay * p;
}

JOULE_LANES_INLINE double sum_lanes(const double* lanes) {
  double s = 0;
  for (int k = 0; k < kLanes; ++k) s += lanes[k];
  return s;
}

}  // namespace

JOULE_VECTOR_CLONES
double sum_squares(const float* __restrict__ x, int64_t n) {
  double lanes[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < kLanes; ++k) lanes[k] += static_cast<double>(x[i + k]) * x[i + k];
  for (; i < n; ++i) lanes[0] += static_cast<double>(x[i]) * x[i];
  return sum_lanes(lanes);
}

JOULE_VECTOR_CLONES
Norms moments_and_norms(const float* __restrict__ g, float* __restrict__ m, float* __restrict__ v,
                        const float* __restrict__ p, int64_t n, const Hyperparameters& h) {
  double us[kLanes] = {}, ps[kLanes] = {};
  auto one = [&](int64_t i, int k) {
    moments(g[i], m[i], v[i], h);
    const float u = direction(m[i], v[i], p[i], h);
    us[k] += static_cast<double>(u) * u;
    ps[k] += static_cast<double>(p[i]) * p[i];
  };
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int k = 0; k < kLanes; ++k) one(i + k, k);
  for (; i < n; ++i) one(i, 0);
  return {sum_lanes(us), sum_lanes(ps)};
}

JOULE_VECTOR_CLONES
void apply(float* __restrict__ p, const float* __restrict__ m, const float* __restrict__ v, int64_t n,
           const Hyperparameters& h, float step) {
  for (int64_t i = 0; i < n; ++i) p[i] -= step * direction(m[i], v[i], p[i], h);
}

JOULE_VECTOR_CLONES
void moments_and_apply(const float* __restrict__ g, float* __restrict__ m, float* __restrict__ v, float* __restrict__ p,
                       int64_t n, const Hyperparameters& h, float step) {
  for (int64_t i = 0; i < n; ++i) {
    moments(g[i], m[i], v[i], h);
    p[i] -= step * direction(m[i], v[i], p[i], h);
  }
}

}  // namespace joule::trainer::lamb_cpu
