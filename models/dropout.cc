#include "models/dropout.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <mutex>

namespace joule::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kChunk = int64_t{1} << 16;  // elements per parallel task; a multiple of 2 (two draws per hash)

// SplitMix64's output function: a bijective mix whose outputs for consecutive counters pass BigCrush.
inline uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// mask[i] = 1 when element `offset + i` is kept: its 32-bit draw is below keep_below = (1 - p) 2^32.
void draw_mask(uint64_t seed, int64_t offset, int64_t n, uint64_t keep_below, uint8_t* mask) {
  for (int64_t i = 0; i < n; i += 2) {
    const uint64_t r = mix(seed + static_cast<uint64_t>((offset + i) / 2) * 0x9e3779b97f4a7c15ull);
    mask[i] = (r & 0xffffffffull) < keep_below;
    if (i + 1 < n) mask[i + 1] = (r >> 32) < keep_below;
  }
}

// out[i] = mask[i] ? in[i] * scale : 0 (the product in fp32), chunk by chunk over the intra-op threads.
template <typename T>
void masked_scale(const T* in, const uint8_t* mask, float scale, int64_t n, T* out) {
  at::parallel_for(0, n, kChunk, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) out[i] = static_cast<T>(mask[i] ? static_cast<float>(in[i]) * scale : 0.0f);
  });
}

void masked_scale(const torch::Tensor& in, const torch::Tensor& mask, float scale, torch::Tensor& out) {
  const uint8_t* m = mask.data_ptr<uint8_t>();
  if (in.scalar_type() == torch::kBFloat16)
    masked_scale(in.data_ptr<c10::BFloat16>(), m, scale, in.numel(), out.data_ptr<c10::BFloat16>());
  else
    masked_scale(in.data_ptr<float>(), m, scale, in.numel(), out.data_ptr<float>());
}

uint64_t draw_seed() {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return at::check_generator<at::CPUGeneratorImpl>(generator)->random64();
}

struct CpuDropout : torch::autograd::Function<CpuDropout> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input, double p) {
    RECORD_FUNCTION("joule::dropout", std::vector<c10::IValue>());
    const torch::Tensor x = input.contiguous();
    const int64_t n = x.numel();
    torch::Tensor mask = torch::empty(x.sizes(), x.options().dtype(torch::kUInt8));
    torch::Tensor out = torch::empty_like(x, torch::MemoryFormat::Contiguous);
    const uint64_t seed = draw_seed();
    const uint64_t keep_below = static_cast<uint64_t>(std::ldexp(1.0 - p, 32));
    const float scale = static_cast<float>(1.0 / (1.0 - p));
    uint8_t* m = mask.data_ptr<uint8_t>();
    // Chunks start at even offsets, so each hash's two draws land in one chunk whatever the threads.
    at::parallel_for(0, (n + kChunk - 1) / kChunk, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) draw_mask(seed, c * kChunk, std::min(kChunk, n - c * kChunk), keep_below, m + c * kChunk);
    });
    masked_scale(x, mask, scale, out);
    ctx->save_for_backward({mask});
    ctx->saved_data["scale"] = static_cast<double>(scale);
    ctx->saved_data["dtype"] = x.scalar_type();
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grads) {
    RECORD_FUNCTION("joule::dropout_backward", std::vector<c10::IValue>());
    const torch::Tensor mask = ctx->get_saved_variables()[0];
    const torch::Tensor g = grads[0].to(ctx->saved_data["dtype"].toScalarType()).contiguous();
    torch::Tensor dx = torch::empty_like(g, torch::MemoryFormat::Contiguous);
    masked_scale(g, mask, static_cast<float>(ctx->saved_data["scale"].toDouble()), dx);
    return {dx, torch::Tensor()};
  }
};

}  // namespace

torch::Tensor train_dropout(const torch::Tensor& x, double p) {
  if (p <= 0.0) return x;
  const bool cpu_dtype = x.scalar_type() == torch::kFloat || x.scalar_type() == torch::kBFloat16;
  if (p >= 1.0 || !x.device().is_cpu() || !cpu_dtype) return torch::dropout(x, p, /*train=*/true);
  return CpuDropout::apply(x, p);
}

}  // namespace joule::models
