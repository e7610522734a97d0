#include "models/gelu.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "models/bf16_bits.h"
#include "models/cpu_vector.h"

namespace joule::models {
namespace {

using Table = std::array<uint16_t, 65536>;

const Table& gelu_table() {
  static const Table table = [] {
    Table t;
    for (uint32_t bits = 0; bits < t.size(); ++bits) {
      const double x = cpu::bf16_to_float(static_cast<uint16_t>(bits));
      t[bits] = cpu::float_to_bf16(static_cast<float>(0.5 * x * std::erfc(-x / std::sqrt(2.0))));
    }
    return t;
  }();
  return table;
}

using DerivativeTable = std::array<float, 65536>;

const DerivativeTable& gelu_derivative_table() {
  static const DerivativeTable table = [] {
    DerivativeTable t;
    const double inv_sqrt_2pi = 0.3989422804014327;
    for (uint32_t bits = 0; bits < t.size(); ++bits) {
      const double x = cpu::bf16_to_float(static_cast<uint16_t>(bits));
      t[bits] = static_cast<float>(0.5 * std::erfc(-x / std::sqrt(2.0)) + x * std::exp(-0.5 * x * x) * inv_sqrt_2pi);
    }
    return t;
  }();
  return table;
}

// dx[j] = bf16(dy[j] GELU'(x[j])), acc[j] += dx[j] for a row segment of n.
JOULE_VECTOR_CLONES
void gelu_backward_row(const uint16_t* __restrict dy, const uint16_t* __restrict x, int64_t n,
                       const float* __restrict derivative, uint16_t* __restrict dx, float* __restrict acc) {
  for (int64_t j = 0; j < n; ++j) {
    const uint16_t g = cpu::float_to_bf16(cpu::bf16_to_float(dy[j]) * derivative[x[j]]);
    dx[j] = g;
    acc[j] += cpu::bf16_to_float(g);
  }
}

void check_bf16_cpu(const torch::Tensor& x, const char* what) {
  TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kBFloat16 && x.is_contiguous(), what,
              ": a contiguous bf16 CPU tensor");
}

// dst[i] = GELU(src[i]) for i < n (dst may be src), the elements split among the threads.
void gelu_pass(const uint16_t* src, uint16_t* dst, int64_t n) {
  if (n == 0) return;
  RECORD_FUNCTION("joule::gelu", std::vector<c10::IValue>());
  const uint16_t* table = gelu_table().data();  // made once, before the threads read it
  at::parallel_for(0, n, 4096, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) dst[i] = table[src[i]];
  });
}

}  // namespace

void gelu_bf16_row(uint16_t* x, int64_t n) {
  const uint16_t* table = gelu_table().data();
  for (int64_t j = 0; j < n; ++j) x[j] = table[x[j]];
}

void gelu_bf16_(const torch::Tensor& x) {
  check_bf16_cpu(x, "gelu_bf16_");
  torch::Tensor t = x;
  gelu_pass(cpu::bf16_bits(x), cpu::bf16_bits(t), x.numel());
}

torch::Tensor gelu_bf16(const torch::Tensor& x) {
  check_bf16_cpu(x, "gelu_bf16");
  torch::Tensor y = torch::empty_like(x);
  gelu_pass(cpu::bf16_bits(x), cpu::bf16_bits(y), x.numel());
  return y;
}

torch::Tensor gelu_backward_bf16(const torch::Tensor& dy, const torch::Tensor& x, torch::Tensor* column_sums) {
  check_bf16_cpu(x, "gelu_backward_bf16");
  check_bf16_cpu(dy, "gelu_backward_bf16");
  TORCH_CHECK(dy.sizes() == x.sizes(), "gelu_backward_bf16: the gradient's shape ", dy.sizes(), " is not x's ",
              x.sizes());
  torch::Tensor dx = torch::empty_like(x);
  const int64_t n = x.dim() > 0 ? x.size(-1) : 1, rows = n > 0 ? x.numel() / n : 0;
  if (column_sums)
    TORCH_CHECK(column_sums->device().is_cpu() && column_sums->scalar_type() == torch::kFloat &&
                    column_sums->is_contiguous() && column_sums->numel() == n,
                "gelu_backward_bf16: the column sums must be a contiguous fp32 CPU tensor of ", n);
  if (x.numel() == 0) return dx;
  RECORD_FUNCTION("joule::gelu_backward", std::vector<c10::IValue>());
  const float* derivative = gelu_derivative_table().data();
  const uint16_t* g = cpu::bf16_bits(dy);
  const uint16_t* v = cpu::bf16_bits(x);
  uint16_t* out = cpu::bf16_bits(dx);
  float* sums = column_sums ? column_sums->data_ptr<float>() : nullptr;
  // Each thread takes a range of columns (whole tiles of 256) and walks the rows through it: one thread reads the
  // rows whole, in memory order, as the prefetcher likes them (tiles walked one at a time were twice as slow in the
  // step, its operands out of cache).
  constexpr int64_t kColumns = 256;
  at::parallel_for(0, (n + kColumns - 1) / kColumns, 1, [&](int64_t c0, int64_t c1) {
    const int64_t j0 = c0 * kColumns, width = std::min(n, c1 * kColumns) - j0;
    std::vector<float> scratch(sums ? 0 : static_cast<size_t>(width));
    float* acc = sums ? sums + j0 : scratch.data();
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t at = r * n + j0;
      gelu_backward_row(g + at, v + at, width, derivative, out + at, acc);
    }
  });
  return dx;
}

}  // namespace joule::models
