// Small element-wise kernels for the CPU paths of dropout and the bf16 attention softmax, written so that GCC
// vectorizes them, and compiled once per instruction set with `JOULE_VECTOR_CLONES` (the loader picks the widest the
// processor has; x86-64 only, one plain version elsewhere). bf16 values are handled as their 16-bit patterns.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__) && \
    !defined(__SANITIZE_THREAD__)
#define JOULE_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define JOULE_VECTOR_CLONES
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

// e^x to about 2 ulp of fp32 (Cephes' expf: ln 2 split in two, a degree-5 polynomial, 2^n from the exponent bits);
// exactly 0 below -87.3 (where fp32's e^x leaves the normal range), so masked keys get no weight.
inline float exp_approx(float x) {
  const bool underflow = x < -87.3f;
  x = x > 88.3f ? 88.3f : (underflow ? 0.0f : x);
  const float n = __builtin_floorf(x * 1.44269504088896341f + 0.5f);
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const float scale = bits_to_float(static_cast<uint32_t>(static_cast<int32_t>(n) + 127) << 23);
  return underflow ? 0.0f : y * scale;
}

// Reductions over a row in 16 fixed lanes (then the lanes in order): the compiler vectorizes them without reordering
// anything itself, so results are the same on every run.
constexpr int kLanes = 16;

inline float lanes_max(const float* x, int64_t n) {
  float acc[kLanes];
  for (int l = 0; l < kLanes; ++l) acc[l] = -std::numeric_limits<float>::infinity();
  int64_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (int l = 0; l < kLanes; ++l) acc[l] = acc[l] > x[j + l] ? acc[l] : x[j + l];
  float top = -std::numeric_limits<float>::infinity();
  for (int l = 0; l < kLanes; ++l) top = std::max(top, acc[l]);
  for (; j < n; ++j) top = std::max(top, x[j]);
  return top;
}

inline float lanes_sum(const float* x, int64_t n) {
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
