// Small element-wise kernels for the CPU paths of dropout and the bf16 attention softmax, written so that GCC
// vectorizes them, and compiled once per instruction set with `JOULE_VECTOR_CLONES` (the loader picks the widest the
// processor has; x86-64 only, one plain version elsewhere). bf16 values are handled as their 16-bit patterns.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__)
#define JOULE_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define JOULE_VECTOR_CLONES
#endif

// The helpers below are always inlined into the clone that calls them: out of line they would be the baseline (SSE2)
// copy, slower, and for the FloatLanes ones a call across ISAs passes the 64-byte vector differently on each side
// (what -Wpsabi warns of): GCC left some of them out of line when merely `inline`.
#if defined(__GNUC__)
#define JOULE_LANES_INLINE inline __attribute__((always_inline))
#else
#define JOULE_LANES_INLINE inline
#endif

namespace joule::models::cpu {

inline float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

inline float bf16_to_float(uint16_t b) { return bits_to_float(static_cast<uint32_t>(b) << 16); }

// Round to nearest even, as c10::BFloat16 does for finite values and infinities (a NaN stays a NaN or becomes an
// infinity: still non-finite, which is all the trainer checks).
inline uint16_t float_to_bf16(float f) {
  const uint32_t u = float_to_bits(f);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

// e^x / 2^n for n = floor(x log2(e) + 1/2): Cephes' expf, ln 2 split in two and a degree-5 polynomial; for one float
// or for 16 lanes (FloatLanes below), the same operations.
template <typename T>
JOULE_LANES_INLINE T exp_reduced(T x, T n) {
  const T r = x - n * 0.693359375f + n * 2.12194440e-4f;
  T p = T{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  return p * r * r + r + 1.0f;
}

// e^x to about 2 ulp of fp32 (exp_reduced, times 2^n from the exponent bits); exactly 0 below -87.3 (where fp32's
// e^x leaves the normal range), so masked keys get no weight.
JOULE_LANES_INLINE float exp_approx(float x) {
  const bool underflow = x < -87.3f;
  x = x > 88.3f ? 88.3f : (underflow ? 0.0f : x);
  const float n = __builtin_floorf(x * 1.44269504088896341f + 0.5f);
  const float y = exp_reduced(x, n);
  const float scale = bits_to_float(static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23);
  return underflow ? 0.0f : y * scale;
}

// The same arithmetic on 16 lanes at once, written with GCC's vector extensions for the loops the compiler does not
// vectorize well on its own (a row's pass with a reduction in it): each lane computes exactly what the scalar
// functions above compute for its element.
// (The kernel files build with -Wno-psabi: these helpers are always inlined, so no call passes a vector across ISAs.)
using FloatLanes = float __attribute__((vector_size(64)));
using IntLanes = int32_t __attribute__((vector_size(64)));
using BitsLanes = uint32_t __attribute__((vector_size(64)));
using Bf16Lanes = uint16_t __attribute__((vector_size(32)));

JOULE_LANES_INLINE FloatLanes splat(float x) { return FloatLanes{} + x; }

JOULE_LANES_INLINE FloatLanes load_lanes(const float* x) {
  FloatLanes v;
  std::memcpy(&v, x, sizeof v);
  return v;
}

JOULE_LANES_INLINE void store_lanes(float* x, FloatLanes v) { std::memcpy(x, &v, sizeof v); }

JOULE_LANES_INLINE FloatLanes bf16_lanes_to_float(const uint16_t* b) {
  Bf16Lanes h;
  std::memcpy(&h, b, sizeof h);
  const BitsLanes u = __builtin_convertvector(h, BitsLanes) << 16;
  FloatLanes f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

JOULE_LANES_INLINE void float_lanes_to_bf16(FloatLanes f, uint16_t* b) {
  BitsLanes u;
  std::memcpy(&u, &f, sizeof u);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const Bf16Lanes h = __builtin_convertvector(u, Bf16Lanes);
  std::memcpy(b, &h, sizeof h);
}

// Compares and selects on 16 lanes. GCC 12 compiles a compare of 64-byte vectors into one scalar compare per lane
// where the clone's vectors are narrower (the avx2 clone: the attention softmax ran at about 25 cycles an element), so
// a kernel that compares takes one of these as a template argument: `WholeLanes` compares the 64-byte vector at once
// (native in the avx512f clone), `HalfLanes` each 32-byte half on its own (native from AVX on). `f` is the same
// expression either way, applied lane by lane, so both give the same bits; `whole_lane_compares` says which suits the
// processor.
#if defined(__GNUC__)
#define JOULE_LANE_FN __attribute__((always_inline))
#else
#define JOULE_LANE_FN
#endif

struct WholeLanes {
  template <typename F>
  JOULE_LANES_INLINE static FloatLanes apply(F f, FloatLanes a, FloatLanes b) {
    return f(a, b);
  }
};

struct HalfLanes {
  using Half = float __attribute__((vector_size(32)));
  template <typename F>
  JOULE_LANES_INLINE static FloatLanes apply(F f, FloatLanes a, FloatLanes b) {
    Half ah[2], bh[2], r[2];
    std::memcpy(ah, &a, sizeof a);
    std::memcpy(bh, &b, sizeof b);
    r[0] = f(ah[0], bh[0]);
    r[1] = f(ah[1], bh[1]);
    FloatLanes out;
    std::memcpy(&out, r, sizeof out);
    return out;
  }
};

inline bool whole_lane_compares() {
#if defined(__x86_64__) && defined(__GNUC__)
  return __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}

// exp_approx on every lane (floor from the truncation toward zero, exact in this range), its compares as `Lanes`
// makes them.
template <class Lanes>
JOULE_LANES_INLINE FloatLanes exp_approx(FloatLanes x) {
  x = Lanes::apply([](auto v, auto) JOULE_LANE_FN { return v > 88.3f ? decltype(v){} + 88.3f : v; }, x, x);
  const auto underflow_to_zero = [](auto v, auto r) JOULE_LANE_FN { return v < -87.3f ? decltype(r){} : r; };
  const FloatLanes clamped = Lanes::apply(underflow_to_zero, x, x);
  const FloatLanes y0 = clamped * 1.44269504088896341f + 0.5f;
  const FloatLanes t = __builtin_convertvector(__builtin_convertvector(y0, IntLanes), FloatLanes);
  const FloatLanes n = Lanes::apply([](auto a, auto b) JOULE_LANE_FN { return a > b ? a - 1.0f : a; }, t, y0);
  const FloatLanes y = exp_reduced(clamped, n);
  const BitsLanes bits = (BitsLanes)((__builtin_convertvector(n, IntLanes) + 127) << 23);
  FloatLanes scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return Lanes::apply(underflow_to_zero, x, y * scale);
}

// a > b ? a : b on every lane.
template <class Lanes>
JOULE_LANES_INLINE FloatLanes lanes_max(FloatLanes a, FloatLanes b) {
  return Lanes::apply([](auto u, auto v) JOULE_LANE_FN { return u > v ? u : v; }, a, b);
}

// A sum over a row in 16 fixed lanes (then the lanes in order): the compiler vectorizes it without reordering
// anything itself, so results are the same on every run.
constexpr int kLanes = 16;

JOULE_LANES_INLINE float lanes_sum(const float* x, int64_t n) {
  float acc[kLanes] = {};
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] += x[j + l];
  float sum = 0;
  for (int l = 0; l < kLanes; ++l) sum += acc[l];
  for (; j < n; ++j) sum += x[j];
  return sum;
}

}  // namespace joule::models::cpu
