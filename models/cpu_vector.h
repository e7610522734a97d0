// Small element-wise kernels for the CPU paths of dropout and the bf16 attention softmax, written so that GCC
// vectorizes them, and compiled once per instruction set with `JOULE_VECTOR_CLONES` (the loader picks the widest the
// processor has; x86-64 only, one plain version elsewhere). bf16 values are handled as their 16-bit patterns.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__)
#define JOULE_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define JOULE_VECTOR_CLONES
#endif

// The helpers below are always inlined into the clone that calls them: out of line they would be the baseline (SSE2)
// copy, slower, and for the Lanes<W> ones a call across ISAs passes the vector differently on each side
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
// or for W lanes (Lanes<W> below), the same operations.
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

// The same arithmetic on W lanes at once, written with GCC's vector extensions for the loops the compiler does not
// vectorize well on its own (a row's pass with a reduction in it): each lane computes exactly what the scalar
// functions above compute for its element, at either width. W = 16 is native in the avx512f clone, W = 8 from AVX on:
// GCC 12 compiles a compare of vectors wider than the clone's registers into one scalar compare per lane (16 lanes in
// the avx2 clone ran the attention softmax at about 25 cycles an element), so a kernel takes W as a template argument
// and `native_lanes` says which suits the processor.
// (The kernel files build with -Wno-psabi: these helpers are always inlined, so no call passes a vector across ISAs.)
// (One specialization per width: GCC 12 drops a vector_size that depends on a template parameter.)
template <int W>
struct Lanes;
#define JOULE_DEFINE_LANES(W)                               \
  template <>                                               \
  struct Lanes<W> {                                         \
    using F = float __attribute__((vector_size(4 * W)));    \
    using I = int32_t __attribute__((vector_size(4 * W)));  \
    using U = uint32_t __attribute__((vector_size(4 * W))); \
    using H = uint16_t __attribute__((vector_size(2 * W))); \
  };
JOULE_DEFINE_LANES(16)
JOULE_DEFINE_LANES(8)
#undef JOULE_DEFINE_LANES

// The width a test forces on every kernel that asks native_lanes (8 or 16; anything else: none; either width runs on
// any processor).
inline std::atomic<int>& forced_lanes_for_testing() {
  static std::atomic<int> lanes{0};
  return lanes;
}

inline int native_lanes() {
  if (const int forced = forced_lanes_for_testing().load(std::memory_order_relaxed); forced == 8 || forced == 16)
    return forced;
#if defined(__x86_64__) && defined(__GNUC__)
  return __builtin_cpu_supports("avx512f") ? 16 : 8;
#else
  return 8;
#endif
}

template <int W>
JOULE_LANES_INLINE typename Lanes<W>::F splat(float x) {
  return typename Lanes<W>::F{} + x;
}

template <int W>
JOULE_LANES_INLINE typename Lanes<W>::F load_lanes(const float* x) {
  typename Lanes<W>::F v;
  std::memcpy(&v, x, sizeof v);
  return v;
}

template <int W>
JOULE_LANES_INLINE void store_lanes(float* x, typename Lanes<W>::F v) {
  std::memcpy(x, &v, sizeof v);
}

template <int W>
JOULE_LANES_INLINE typename Lanes<W>::F bf16_lanes_to_float(const uint16_t* b) {
  typename Lanes<W>::H h;
  std::memcpy(&h, b, sizeof h);
  const typename Lanes<W>::U u = __builtin_convertvector(h, typename Lanes<W>::U) << 16;
  typename Lanes<W>::F f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}

template <int W>
JOULE_LANES_INLINE void float_lanes_to_bf16(typename Lanes<W>::F f, uint16_t* b) {
  typename Lanes<W>::U u;
  std::memcpy(&u, &f, sizeof u);
  u = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  const typename Lanes<W>::H h = __builtin_convertvector(u, typename Lanes<W>::H);
  std::memcpy(b, &h, sizeof h);
}

// exp_approx on every lane (floor from the truncation toward zero, exact in this range).
template <int W>
JOULE_LANES_INLINE typename Lanes<W>::F exp_approx(typename Lanes<W>::F x) {
  using F = typename Lanes<W>::F;
  using I = typename Lanes<W>::I;
  x = x > 88.3f ? F{} + 88.3f : x;
  const auto underflow = x < -87.3f;
  const F clamped = underflow ? F{} : x;
  const F y0 = clamped * 1.44269504088896341f + 0.5f;
  const F t = __builtin_convertvector(__builtin_convertvector(y0, I), F);
  const F n = t > y0 ? t - 1.0f : t;
  const F y = exp_reduced(clamped, n);
  const typename Lanes<W>::U bits = (typename Lanes<W>::U)((__builtin_convertvector(n, I) + 127) << 23);
  F scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return underflow ? F{} : y * scale;
}

// a > b ? a : b on every lane.
template <int W>
JOULE_LANES_INLINE typename Lanes<W>::F lanes_max(typename Lanes<W>::F a, typename Lanes<W>::F b) {
  return a > b ? a : b;
}

// A sum over a row in 16 fixed lanes (then the lanes in order): the compiler vectorizes it without reordering
// anything itself, so results are the same on every run. Kernels that sum on Lanes<W> keep these 16 lanes (16 / W
// vectors), so they give the same bits at either width.
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
