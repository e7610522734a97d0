#include "models/dropout.h"
#include "launch/torch_compat.h"
#include "launch/util/hash.h"
#include "models/cpu_vector.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <mutex>
#include <optional>

namespace joule::models {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kChunk = int64_t{1} << 16;  // elements per parallel task; a multiple of 2 (two draws per hash)

// mask[i] = 1 when element `offset + i` is kept: its 32-bit draw is below keep_below = (1 - p) 2^32.
JOULE_VECTOR_CLONES
void draw_mask(uint64_t seed, int64_t offset, int64_t n, uint64_t keep_below, uint8_t* mask) {
  if (n <= 0) return;
  if (offset % 2) {  // element `offset` is the high half of draw offset / 2; the rest start at an even element
    mask[0] = (mix64(seed + static_cast<uint64_t>(offset / 2) * kGoldenGamma) >> 32) < keep_below;
    ++offset, ++mask, --n;
  }
  // Draw k of the whole tensor: one hash, two 32-bit halves (elements 2k and 2k + 1).
  auto draw = [&](int64_t k) { return mix64(seed + static_cast<uint64_t>(offset / 2 + k) * kGoldenGamma); };
  const int64_t pairs = n / 2;
  for (int64_t k = 0; k < pairs; ++k) {
    const uint64_t r = draw(k);
    mask[2 * k] = (r & 0xffffffffull) < keep_below;
    mask[2 * k + 1] = (r >> 32) < keep_below;
  }
  if (n % 2) mask[n - 1] = (draw(pairs) & 0xffffffffull) < keep_below;
}

// out[i] = mask[i] ? in[i] * scale : 0 (the product in fp32).
JOULE_VECTOR_CLONES
void masked_scale_f32(const float* in, const uint8_t* mask, float scale, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {  // a bit mask instead of a branch: the loop vectorizes
    const uint32_t keep = 0u - static_cast<uint32_t>(mask[i] != 0);
    out[i] = cpu::bits_to_float(cpu::float_to_bits(in[i] * scale) & keep);
  }
}

// The same, chunk by chunk over the intra-op threads, for fp32 or bf16 tensors.
void masked_scale(const torch::Tensor& in, const torch::Tensor& mask, float scale, torch::Tensor& out) {
  const uint8_t* m = mask.data_ptr<uint8_t>();
  const bool bf16 = in.scalar_type() == torch::kBFloat16;
  const void* src = in.data_ptr();
  void* dst = out.data_ptr();
  at::parallel_for(0, in.numel(), kChunk, [&](int64_t b, int64_t e) {
    if (bf16)
      dropout_scale_bf16(static_cast<const uint16_t*>(src) + b, m + b, scale, e - b, static_cast<uint16_t*>(dst) + b);
    else
      masked_scale_f32(static_cast<const float*>(src) + b, m + b, scale, e - b, static_cast<float*>(dst) + b);
  });
}

uint64_t draw_seed() {
  at::Generator generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return at::check_generator<at::CPUGeneratorImpl>(generator)->random64();
}

// The thread's DropoutRows scope: the run seed, the stream index of row 0, the calls drawn so far.
struct RowsScope {
  uint64_t seed = 0, first_row = 0, calls = 0;
};
thread_local std::optional<RowsScope> t_scope;

// A call's key and the stream index of its row 0: the scope's next call, or a generator draw and row 0.
struct CallKey {
  uint64_t seed = 0, first_row = 0;
};
CallKey next_call() {
  if (!t_scope) return {draw_seed(), 0};
  constexpr uint64_t kDropoutDomain = 0x64726f706f757421ull;  // "dropout!": apart from the run seed's other uses
  return {mix64(mix64(t_scope->seed ^ kDropoutDomain) + t_scope->calls++ * kGoldenGamma), t_scope->first_row};
}

// Row `row`'s key within a call.
uint64_t row_seed(uint64_t call_seed, uint64_t row) { return mix64(call_seed + mix64(row * kGoldenGamma + 1)); }

struct CpuDropout : torch::autograd::Function<CpuDropout> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& input, double p) {
    RECORD_FUNCTION("joule::dropout", std::vector<c10::IValue>());
    const torch::Tensor x = input.contiguous();
    const int64_t n = x.numel();
    torch::Tensor mask = torch::empty(x.sizes(), x.options().dtype(torch::kUInt8));
    torch::Tensor out = torch::empty_like(x, torch::MemoryFormat::Contiguous);
    const DropoutDraw draw(p, x);
    const float scale = draw.scale();
    uint8_t* m = mask.data_ptr<uint8_t>();
    at::parallel_for(0, (n + kChunk - 1) / kChunk, 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) draw.fill_mask(c * kChunk, std::min(kChunk, n - c * kChunk), m + c * kChunk);
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

JOULE_VECTOR_CLONES
void dropout_scale_bf16(const uint16_t* in, const uint8_t* mask, float scale, int64_t n, uint16_t* out) {
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t keep = static_cast<uint16_t>(0u - static_cast<uint32_t>(mask[i] != 0));
    out[i] = cpu::float_to_bf16(cpu::bf16_to_float(in[i]) * scale) & keep;
  }
}

DropoutRows::DropoutRows(uint64_t seed, uint64_t first_row) {
  TORCH_CHECK(!t_scope, "DropoutRows: a scope is already open on this thread");
  t_scope = RowsScope{seed, first_row, 0};
}

DropoutRows::~DropoutRows() { t_scope.reset(); }

DropoutDraw::DropoutDraw(double p, const torch::Tensor& x)
    : keep_below_(static_cast<uint64_t>(std::ldexp(1.0 - p, 32))), scale_(static_cast<float>(1.0 / (1.0 - p))) {
  TORCH_CHECK(x.dim() >= 1 && x.numel() > 0, "dropout: a tensor with rows, got ", x.sizes());
  const CallKey key = next_call();
  seed_ = key.seed;
  first_row_ = key.first_row;
  row_numel_ = x.numel() / x.size(0);
}

void DropoutDraw::fill_mask(int64_t offset, int64_t n, uint8_t* mask) const {
  while (n > 0) {  // row by row: element e of row r draws counter e of the row's key
    const int64_t row = offset / row_numel_, e = offset % row_numel_;
    const int64_t take = std::min(n, row_numel_ - e);
    draw_mask(row_seed(seed_, first_row_ + static_cast<uint64_t>(row)), e, take, keep_below_, mask);
    offset += take, mask += take, n -= take;
  }
}

void reseed_device_dropout(const torch::Device& device) {
  if (device.is_cpu()) return;
  const CallKey key = next_call();
  launch::compat::reseed_default_generator(device, row_seed(key.seed, key.first_row));
}

torch::Tensor train_dropout(const torch::Tensor& x, double p) {
  if (p <= 0.0) return x;
  const bool cpu_dtype = x.scalar_type() == torch::kFloat || x.scalar_type() == torch::kBFloat16;
  if (!x.device().is_cpu()) {
    // The device's own dropout kernel, its generator reseeded from the CPU generator: the masks follow
    // torch::manual_seed and resume from the state checkpoints save, as on the CPU (other masks than the CPU's).
    reseed_device_dropout(x.device());
    return torch::dropout(x, p, /*train=*/true);
  }
  if (p >= 1.0 || !cpu_dtype) return torch::dropout(x, p, /*train=*/true);
  return CpuDropout::apply(x, p);
}

}  // namespace joule::models
