#include "models/gelu.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

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

}  // namespace

void gelu_bf16_row(uint16_t* x, int64_t n) {
  const uint16_t* table = gelu_table().data();
  for (int64_t j = 0; j < n; ++j) x[j] = table[x[j]];
}

void gelu_bf16_(const torch::Tensor& x) {
  TORCH_CHECK(x.device().is_cpu() && x.scalar_type() == torch::kBFloat16 && x.is_contiguous(),
              "gelu_bf16_: a contiguous bf16 CPU tensor");
  if (x.numel() == 0) return;
  RECORD_FUNCTION("joule::gelu", std::vector<c10::IValue>());
  gelu_table();  // made once, before the threads read it
  const int64_t n = x.size(-1), rows = x.numel() / n;
  torch::Tensor t = x;
  uint16_t* data = cpu::bf16_bits(t);
  at::parallel_for(0, rows, 8, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) gelu_bf16_row(data + r * n, n);
  });
}

}  // namespace joule::models
