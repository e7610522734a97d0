#include "models/gelu.h"

#include <ATen/Parallel.h>

#include "models/bf16_bits.h"
#include "models/cpu_vector.h"

#if defined(__x86_64__) && defined(__GNUC__)
// GCC 12's AVX-512 intrinsics initialize their undefined operands from themselves (GCC bug 105593): not ours.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#define JOULE_GELU_AVX512 1
#else
#define JOULE_GELU_AVX512 0
#endif

namespace joule::models {
namespace {

// Abramowitz & Stegun 7.1.26: erfc(z) = t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) e^(-z^2), t = 1 / (1 + p z), z >= 0;
// the coefficients halved here, as Φ(x) needs erfc(|x| / sqrt 2) / 2.
constexpr float kP = 0.3275911f * 0.70710678118654752f;  // p / sqrt 2, applied to |x|
constexpr float kA1 = 0.5f * 0.254829592f, kA2 = 0.5f * -0.284496736f, kA3 = 0.5f * 1.421413741f,
                kA4 = 0.5f * -1.453152027f, kA5 = 0.5f * 1.061405429f;

float gelu_one(float x) {
  const float ax = x < 0 ? -x : x;
  const float t = 1.0f / (ax * kP + 1.0f);
  const float half_erfc = ((((kA5 * t + kA4) * t + kA3) * t + kA2) * t + kA1) * t * cpu::exp_approx(-0.5f * ax * ax);
  return x * (x >= 0 ? 1.0f - half_erfc : half_erfc);
}

void gelu_row_scalar(uint16_t* x, int64_t n) {
  for (int64_t j = 0; j < n; ++j) x[j] = cpu::float_to_bf16(gelu_one(cpu::bf16_to_float(x[j])));
}

#if JOULE_GELU_AVX512
// gelu_one on 16 lanes; e^w with the same reduction and polynomial as cpu::exp_approx (floor and 2^n by roundscale
// and scalef: exact, as its conversions are).
__attribute__((target("avx512f"))) inline __m512 gelu16(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  const __m512 ax = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff)));
  const __m512 t = _mm512_div_ps(one, _mm512_fmadd_ps(ax, _mm512_set1_ps(kP), one));
  __m512 p = _mm512_fmadd_ps(t, _mm512_set1_ps(kA5), _mm512_set1_ps(kA4));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(kA3));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(kA2));
  p = _mm512_fmadd_ps(p, t, _mm512_set1_ps(kA1));
  p = _mm512_mul_ps(p, t);
  __m512 w = _mm512_mul_ps(_mm512_mul_ps(ax, ax), _mm512_set1_ps(-0.5f));
  const __mmask16 underflow = _mm512_cmp_ps_mask(w, _mm512_set1_ps(-87.3f), _CMP_LT_OQ);
  w = _mm512_max_ps(w, _mm512_set1_ps(-87.3f));
  const __m512 n = _mm512_roundscale_ps(_mm512_fmadd_ps(w, _mm512_set1_ps(1.44269504088896341f), _mm512_set1_ps(0.5f)),
                                        _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
  const __m512 r =
      _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), w));
  __m512 e = _mm512_fmadd_ps(_mm512_set1_ps(1.9875691500e-4f), r, _mm512_set1_ps(1.3981999507e-3f));
  e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(8.3334519073e-3f));
  e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(4.1665795894e-2f));
  e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(1.6666665459e-1f));
  e = _mm512_fmadd_ps(e, r, _mm512_set1_ps(5.0000001201e-1f));
  e = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(e, r), r, r), one);
  e = _mm512_maskz_scalef_ps(static_cast<__mmask16>(~underflow), e, n);
  const __m512 half_erfc = _mm512_mul_ps(p, e);
  const __mmask16 nonnegative = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ);
  return _mm512_mul_ps(x, _mm512_mask_sub_ps(half_erfc, nonnegative, one, half_erfc));
}

__attribute__((target("avx512f"))) void gelu_row_avx512(uint16_t* x, int64_t n) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    const __m256i in = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x + j));
    const __m512 y = gelu16(_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(in), 16)));
    // Round to nearest even, as cpu::float_to_bf16.
    const __m512i u = _mm512_castps_si512(y);
    const __m512i bias =
        _mm512_add_epi32(_mm512_set1_epi32(0x7fff), _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1)));
    const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(u, bias), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(x + j), _mm512_cvtepi32_epi16(rounded));
  }
  gelu_row_scalar(x + j, n - j);
}

bool has_avx512f() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}
#endif

}  // namespace

void gelu_bf16_row(uint16_t* x, int64_t n) {
#if JOULE_GELU_AVX512
  if (has_avx512f()) return gelu_row_avx512(x, n);
#endif
  gelu_row_scalar(x, n);
}

void gelu_bf16_(const torch::Tensor& x) {
  TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kBFloat16 && x.is_contiguous(),
              "gelu_bf16_: a contiguous bf16 CPU tensor");
  if (x.numel() == 0) return;
  const int64_t n = x.size(-1), rows = x.numel() / n;
  torch::Tensor t = x;
  uint16_t* data = cpu::bf16_bits(t);
  at::parallel_for(0, rows, 8, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) gelu_bf16_row(data + r * n, n);
  });
}

}  // namespace joule::models
