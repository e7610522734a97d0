#include "models/bf16_linear.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "launch/util/error.h"
#include "models/bf16_bits.h"
#include "models/cpu_vector.h"
#include "models/gelu.h"

#if JOULE_ONEDNN
#include <oneapi/dnnl/dnnl.hpp>
#endif

namespace joule::models {

#if JOULE_ONEDNN
struct PackedWeight {
  dnnl::memory memory;  // the weight as B [in, out] in oneDNN's blocked layout
  const void* source;   // the plain weight's data and version when packed
  int64_t version;
  int64_t out, in;
};

struct PackedFeedForward {
  int64_t chunk;                                    // inner columns per chunk
  std::vector<std::unique_ptr<PackedWeight>> up;    // chunk c: up's rows [c chunk, (c + 1) chunk)
  std::vector<std::unique_ptr<PackedWeight>> down;  // chunk c: down's columns [c chunk, (c + 1) chunk)
  const void* up_source;
  const void* down_source;
  int64_t up_version, down_version;
};
#else
struct PackedWeight {};
struct PackedFeedForward {};
#endif

namespace {

// ZeroGradientScope's marks: the data of gradients known to hold zeros. Backward may run on autograd's threads.
std::mutex zero_gradients_mutex;
std::unordered_set<const void*> zero_gradients;

#if JOULE_ONEDNN
using torch::autograd::AutogradContext;
using torch::autograd::tensor_list;
using bf16 = c10::BFloat16;

const dnnl::engine& cpu_engine() {
  static const dnnl::engine engine(dnnl::engine::kind::cpu, 0);
  return engine;
}

// Whether oneDNN describes a bf16 matmul on this CPU: it refuses ("could not create a primitive descriptor") where it
// has no kernel for it.
bool onednn_describes_bf16_matmul() {
  using dnnl::memory;
  const memory::desc md({16, 16}, memory::data_type::bf16, memory::format_tag::ab);
  try {
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(md, md, md), cpu_engine());
    return true;
  } catch (const dnnl::error&) {
    return false;
  }
}

// A row-major bf16 matrix operand of a GEMM, or its transpose as stored; for B, a weight's pack instead (`data` then
// stays the plain weight's).
struct Operand {
  const bf16* data;
  bool transposed;
  const PackedWeight* packed = nullptr;
};

// What oneDNN's matmul does to its fp32 accumulator before the store, in the same pass: add a bias [n] (fp32 or
// bf16) on every row, apply GELU (erf), add to what C held, or add an fp32 [m, n] matrix.
struct Epilogue {
  const void* bias = nullptr;
  bool bias_is_bf16 = false;
  bool gelu = false;
  bool accumulate = false;
  const float* add = nullptr;
};

// matmul_bf16 where oneDNN has no bf16 kernels (bf16_gemms_available): A and B widened to fp32 (exactly), LibTorch's
// fp32 GEMM (the BLAS), the epilogue applied to the fp32 product in oneDNN's order, C rounded to bf16 once where it is
// bf16: the numbers of a bf16 GEMM with fp32 accumulation, at the fp32 GEMM's speed less the widening passes.
void matmul_bf16_emulated(Operand a, Operand b, int64_t m, int64_t n, int64_t k, void* c, bool c_is_bf16,
                          const Epilogue& e) {
  if (b.packed) throw joule::InternalError("matmul_bf16: a packed weight where oneDNN has no bf16 kernels");
  const auto widened = [](Operand o, int64_t rows, int64_t cols) {
    const std::vector<int64_t> stored =
        o.transposed ? std::vector<int64_t>{cols, rows} : std::vector<int64_t>{rows, cols};
    const torch::Tensor t = torch::from_blob(const_cast<bf16*>(o.data), stored, torch::kBFloat16).to(torch::kFloat);
    return o.transposed ? t.t() : t;
  };
  const torch::Tensor a32 = widened(a, m, k), b32 = widened(b, k, n);
  torch::Tensor out = torch::from_blob(c, {m, n}, c_is_bf16 ? torch::kBFloat16 : torch::kFloat);
  if (!c_is_bf16 && !e.bias && !e.gelu && !e.add) {  // a weight gradient: stored, or added, in fp32
    if (e.accumulate)
      out.addmm_(a32, b32);
    else
      at::mm_out(out, a32, b32);
    return;
  }
  torch::Tensor acc = torch::mm(a32, b32);
  if (e.bias)
    acc += torch::from_blob(const_cast<void*>(e.bias), {n}, e.bias_is_bf16 ? torch::kBFloat16 : torch::kFloat);
  if (e.accumulate) acc += out;
  if (e.gelu) acc = torch::gelu(acc);
  if (e.add) acc += torch::from_blob(const_cast<float*>(e.add), {m, n}, torch::kFloat);
  out.copy_(acc);  // round to nearest even where C is bf16, as oneDNN's store
}

// C [m, n] = op(A) [m, k] op(B) [k, n], then the epilogue; C in bf16 or fp32. oneDNN's matmul primitive (AMX or
// AVX512-BF16 kernels, fp32 accumulation; oneDNN caches the primitives by shape), emulated in an fp32 GEMM where it has
// no bf16 kernels.
void matmul_bf16(Operand a, Operand b, int64_t m, int64_t n, int64_t k, void* c, bool c_is_bf16, const Epilogue& e) {
  if (m == 0 || n == 0) return;
  if (!bf16_gemms_available()) return matmul_bf16_emulated(a, b, m, n, k, c, c_is_bf16, e);
  using dnnl::memory;
  using dt = memory::data_type;
  try {
    const dnnl::engine& engine = cpu_engine();
    const memory::desc a_md({m, k}, dt::bf16, a.transposed ? memory::dims{1, m} : memory::dims{k, 1});
    const memory::desc b_md =
        b.packed ? b.packed->memory.get_desc()
                 : memory::desc({k, n}, dt::bf16, b.transposed ? memory::dims{1, k} : memory::dims{n, 1});
    const memory::desc c_md({m, n}, c_is_bf16 ? dt::bf16 : dt::f32, memory::dims{n, 1});
    const memory::desc bias_md({1, n}, e.bias_is_bf16 ? dt::bf16 : dt::f32, memory::dims{n, 1});
    const memory::desc add_md({m, n}, dt::f32, memory::dims{n, 1});
    dnnl::primitive_attr attr;
    dnnl::post_ops post;
    if (e.accumulate) post.append_sum(1.0f);
    if (e.gelu) post.append_eltwise(1.0f, dnnl::algorithm::eltwise_gelu_erf, 0.0f, 0.0f);
    const int add_index = post.len();
    if (e.add) post.append_binary(dnnl::algorithm::binary_add, add_md);
    if (post.len() > 0) attr.set_post_ops(post);
    const dnnl::matmul::primitive_desc pd(
        e.bias ? dnnl::matmul::desc(a_md, b_md, bias_md, c_md) : dnnl::matmul::desc(a_md, b_md, c_md), attr, engine);
    std::unordered_map<int, memory> args = {
        {DNNL_ARG_SRC, memory(a_md, engine, const_cast<bf16*>(a.data))},
        {DNNL_ARG_WEIGHTS, b.packed ? b.packed->memory : memory(b_md, engine, const_cast<bf16*>(b.data))},
        {DNNL_ARG_DST, memory(c_md, engine, c)}};
    if (e.bias) args.emplace(DNNL_ARG_BIAS, memory(bias_md, engine, const_cast<void*>(e.bias)));
    if (e.add)
      args.emplace(DNNL_ARG_ATTR_MULTIPLE_POST_OP(add_index) | DNNL_ARG_SRC_1,
                   memory(add_md, engine, const_cast<float*>(e.add)));
    dnnl::stream stream(engine);
    dnnl::matmul(pd).execute(stream, args);
    stream.wait();
  } catch (const dnnl::error& err) {
    throw joule::InternalError("oneDNN bf16 matmul " + std::to_string(m) + "x" + std::to_string(n) + "x" +
                               std::to_string(k) + " failed: " + err.what());
  }
}

// y = act(x W^T + b) in one GEMM: x [..., k] bf16, w16 [n, k] bf16 contiguous, bias [n] fp32/bf16 or empty. y has
// x's shape with the last dimension n, in storage of its own (a custom function's output must not be a view). `x2`:
// x as a contiguous [m, k], made by the caller (which may keep it for backward).
torch::Tensor linear_forward(const torch::Tensor& x, const torch::Tensor& x2, const torch::Tensor& w16,
                             const torch::Tensor& bias, bool gelu, const PackedWeight* packed = nullptr) {
  const int64_t n = w16.size(0), k = w16.size(1), m = x2.size(0);
  TORCH_CHECK(x.size(-1) == k && x2.size(1) == k, "bf16_linear: x has ", x.size(-1), " features, the weight ", k);
  const torch::Tensor b = bias.numel() > 0 ? bias.contiguous() : bias;
  std::vector<int64_t> sizes = x.sizes().vec();
  sizes.back() = n;
  torch::Tensor y = torch::empty(sizes, x2.options());
  Epilogue e;
  e.bias = b.numel() > 0 ? b.data_ptr() : nullptr;
  e.bias_is_bf16 = b.scalar_type() == torch::kBFloat16;
  e.gelu = gelu;
  matmul_bf16({x2.data_ptr<bf16>(), false}, {w16.data_ptr<bf16>(), true, packed}, m, n, k, y.data_ptr<bf16>(), true, e);
  return y;
}

torch::Tensor rows_of(const torch::Tensor& x) { return x.reshape({-1, x.size(-1)}).contiguous(); }

// acc[j] += row[j] for a bf16 row of n.
JOULE_VECTOR_CLONES
void add_bf16_row(const uint16_t* row, int64_t n, float* acc) {
  for (int64_t j = 0; j < n; ++j) acc[j] += cpu::bf16_to_float(row[j]);
}

// The column sums of a contiguous bf16 [m, n] in fp32, rows added in order (the same result at any thread count).
torch::Tensor sum_rows_fp32(const torch::Tensor& dy) {
  RECORD_FUNCTION("joule::bias_grad_sum", std::vector<c10::IValue>());
  const int64_t m = dy.size(0), n = dy.size(1);
  torch::Tensor out = torch::zeros({n}, dy.options().dtype(torch::kFloat));
  const uint16_t* src = cpu::bf16_bits(dy);
  float* acc = out.data_ptr<float>();
  constexpr int64_t kColumns = 256;  // columns per task: a row segment stays in L1 across the rows
  at::parallel_for(0, (n + kColumns - 1) / kColumns, 1, [&](int64_t c0, int64_t c1) {
    const int64_t j0 = c0 * kColumns, j1 = std::min(n, c1 * kColumns);
    for (int64_t r = 0; r < m; ++r) add_bf16_row(src + r * n + j0, j1 - j0, acc + j0);
  });
  return out;
}

// act(x W^T + b) for training. With GELU, the GEMM's bf16 output is kept for backward and GELU is a table pass
// (models/gelu.h) into a tensor of its own; backward takes GELU's gradient and the bias gradient in one pass.
struct Bf16Linear : public torch::autograd::Function<Bf16Linear> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x, const torch::Tensor& weight,
                               const torch::Tensor& bias, bool gelu) {
    RECORD_FUNCTION("joule::bf16_linear", std::vector<c10::IValue>());
    const torch::Tensor w16 = weight.to(torch::kBFloat16).contiguous();  // the weight itself where held in bf16
    const torch::Tensor x2 = rows_of(x);
    const torch::Tensor y = linear_forward(x, x2, w16, bias, false);
    ctx->save_for_backward(gelu ? tensor_list{x2, w16, y} : tensor_list{x2, w16});
    ctx->saved_data["weight"] = weight;  // the parameter itself: backward adds into its .grad
    ctx->saved_data["x_sizes"] = x.sizes().vec();
    ctx->saved_data["bias_dtype"] = bias.numel() > 0 ? bias.scalar_type() : torch::kFloat;
    ctx->saved_data["has_bias"] = bias.numel() > 0;
    return gelu ? gelu_bf16(y) : y;
  }

  static tensor_list backward(AutogradContext* ctx, tensor_list grads) {
    RECORD_FUNCTION("joule::bf16_linear_backward", std::vector<c10::IValue>());
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x2 = saved[0], &w16 = saved[1];
    const int64_t n = w16.size(0), k = w16.size(1), m = x2.size(0);
    torch::Tensor dy = grads[0].to(torch::kBFloat16).reshape({m, n}).contiguous();
    const bool bias_grad = ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2);
    const bool gelu = saved.size() == 3;  // forward kept the GEMM's output, GELU's input
    torch::Tensor bias_sums;              // fp32, where the GELU pass summed them
    if (gelu) {
      if (bias_grad) bias_sums = torch::zeros({n}, dy.options().dtype(torch::kFloat));
      dy = gelu_backward_bf16(dy, saved[2].reshape({m, n}), bias_grad ? &bias_sums : nullptr);
    }
    torch::Tensor dx, dw, db;
    if (ctx->needs_input_grad(0)) {
      if (bf16_gemms_available()) {
        dx = dy.mm(w16);  // LibTorch's bf16 GEMM (oneDNN's kernels inside it)
      } else {
        dx = torch::empty({m, k}, dy.options());
        matmul_bf16({dy.data_ptr<bf16>(), false}, {w16.data_ptr<bf16>(), false}, m, k, n, dx.data_ptr<bf16>(), true,
                    {});
      }
      dx = dx.view(ctx->saved_data["x_sizes"].toIntVector());
    }
    if (ctx->needs_input_grad(1)) {
      torch::Tensor weight = ctx->saved_data["weight"].toTensor();
      const torch::Tensor grad = gradient_to_write_into(weight);
      const bool into_grad = grad.defined();
      torch::Tensor out = into_grad ? grad : torch::empty({n, k}, weight.options().dtype(torch::kFloat));
      Epilogue e;
      e.accumulate = into_grad && !take_zero_gradient(grad);
      matmul_bf16({dy.data_ptr<bf16>(), true}, {x2.data_ptr<bf16>(), false}, n, k, m, out.data_ptr<float>(), false, e);
      if (!into_grad) dw = out.to(weight.scalar_type());  // a weight held in bf16 has a bf16 gradient
    }
    if (bias_grad)  // a bf16-held bias: a bf16 gradient
      db = (bias_sums.defined() ? bias_sums : sum_rows_fp32(dy)).to(ctx->saved_data["bias_dtype"].toScalarType());
    return {dx, dw, db, torch::Tensor()};
  }
};
#endif

std::atomic<int> bf16_gemms_withheld{0};  // WithoutBf16GemmsForTesting scopes alive

}  // namespace

bool bf16_gemms_available() {
#if JOULE_ONEDNN
  static const bool described = onednn_describes_bf16_matmul();
  return described && bf16_gemms_withheld.load() == 0;
#else
  return false;
#endif
}

WithoutBf16GemmsForTesting::WithoutBf16GemmsForTesting() { ++bf16_gemms_withheld; }
WithoutBf16GemmsForTesting::~WithoutBf16GemmsForTesting() { --bf16_gemms_withheld; }

torch::Tensor gradient_to_write_into(const torch::Tensor& weight) {
  const torch::Tensor grad = weight.is_leaf() ? weight.grad() : torch::Tensor();
  const bool writable = grad.defined() && grad.scalar_type() == torch::kFloat && grad.device().is_cpu() &&
                        grad.is_contiguous() && grad.sizes() == weight.sizes() && !torch::GradMode::is_enabled();
  return writable ? grad : torch::Tensor();
}

bool take_zero_gradient(const torch::Tensor& grad) {
  std::lock_guard<std::mutex> lock(zero_gradients_mutex);
  return zero_gradients.erase(grad.data_ptr()) > 0;
}

ZeroGradientScope::ZeroGradientScope(const std::vector<torch::Tensor>& zeroed_gradients) {
  std::lock_guard<std::mutex> lock(zero_gradients_mutex);
  if (!zero_gradients.empty()) throw joule::InternalError("ZeroGradientScope: another scope still holds marks");
#if JOULE_ONEDNN
  for (const torch::Tensor& g : zeroed_gradients)
    if (g.defined() && g.numel() > 0) zero_gradients.insert(g.data_ptr());
#else
  (void)zeroed_gradients;
#endif
}

ZeroGradientScope::~ZeroGradientScope() {
  std::lock_guard<std::mutex> lock(zero_gradients_mutex);
  zero_gradients.clear();
}

PackedWeights::PackedWeights() = default;
PackedWeights::~PackedWeights() = default;

namespace {

#if JOULE_ONEDNN
// A 2-D bf16 CPU weight [out, in] in any strides (a chunk of a larger one too), as B = weight^T [in, out] in the
// layout oneDNN picks for B when free to: the same for every row count m of A, so one m stands for all.
std::unique_ptr<PackedWeight> pack_weight(const torch::Tensor& weight) {
  using dnnl::memory;
  using dt = memory::data_type;
  const int64_t n = weight.size(0), k = weight.size(1);
  try {
    const dnnl::engine& engine = cpu_engine();
    const int64_t m = 1024;
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(memory::desc({m, k}, dt::bf16, memory::dims{k, 1}),
                                                             memory::desc({k, n}, dt::bf16, memory::format_tag::any),
                                                             memory::desc({m, n}, dt::bf16, memory::dims{n, 1})),
                                          engine);
    memory plain(memory::desc({k, n}, dt::bf16, memory::dims{weight.stride(1), weight.stride(0)}), engine,
                 weight.data_ptr());
    auto pack = std::make_unique<PackedWeight>(
        PackedWeight{memory(pd.weights_desc(), engine), weight.data_ptr(), weight._version(), n, k});
    dnnl::stream stream(engine);
    dnnl::reorder(plain, pack->memory).execute(stream, plain, pack->memory);
    stream.wait();
    return pack;
  } catch (const dnnl::error& err) {
    throw joule::InternalError("oneDNN: packing a bf16 weight " + std::to_string(n) + "x" + std::to_string(k) +
                               " failed: " + err.what());
  }
}

bool packable(const torch::Tensor& weight) {
  return weight.device().is_cpu() && weight.scalar_type() == torch::kBFloat16 && weight.dim() == 2 &&
         weight.is_contiguous() && bf16_gemms_available();
}

// The data and version a pack was made from, still the weight's.
bool unchanged(const torch::Tensor& weight, const void* source, int64_t version) {
  return packable(weight) && weight.data_ptr() == source && weight._version() == version;
}
#endif

}  // namespace

bool PackedWeights::add(const torch::Tensor& weight) {
#if JOULE_ONEDNN
  if (!packable(weight)) return false;
  packs_[weight.unsafeGetTensorImpl()] = pack_weight(weight);
  return true;
#else
  (void)weight;
  return false;
#endif
}

bool PackedWeights::add_feed_forward(const torch::Tensor& up, const torch::Tensor& down) {
#if JOULE_ONEDNN
  if (!packable(up) || !packable(down) || up.size(0) != down.size(1) || up.size(1) != down.size(0) || up.numel() == 0)
    return false;
  const int64_t inner = up.size(0), hidden = up.size(1);
  auto f = std::make_unique<PackedFeedForward>();
  f->chunk = inner % hidden == 0 ? hidden : inner;
  for (int64_t c = 0; c < inner / f->chunk; ++c) {
    f->up.push_back(pack_weight(up.narrow(0, c * f->chunk, f->chunk)));
    f->down.push_back(pack_weight(down.narrow(1, c * f->chunk, f->chunk)));
  }
  f->up_source = up.data_ptr(), f->down_source = down.data_ptr();
  f->up_version = up._version(), f->down_version = down._version();
  feed_forward_[up.unsafeGetTensorImpl()] = std::move(f);
  return true;
#else
  (void)up, (void)down;
  return false;
#endif
}

const PackedFeedForward* PackedWeights::find_feed_forward(const torch::Tensor& up, const torch::Tensor& down) const {
  const auto it = feed_forward_.find(up.unsafeGetTensorImpl());
  if (it == feed_forward_.end()) return nullptr;
#if JOULE_ONEDNN
  const PackedFeedForward& f = *it->second;
  if (!unchanged(up, f.up_source, f.up_version) || !unchanged(down, f.down_source, f.down_version) ||
      up.size(0) != f.chunk * static_cast<int64_t>(f.up.size()) || down.size(1) != up.size(0) ||
      up.size(1) != down.size(0) || up.size(1) != f.up.front()->in)
    return nullptr;
#endif
  return it->second.get();
}

size_t PackedWeights::bytes() const {
  size_t total = 0;
#if JOULE_ONEDNN
  for (const auto& [impl, pack] : packs_) total += pack->memory.get_desc().get_size();
  for (const auto& [impl, f] : feed_forward_)
    for (const auto* chunks : {&f->up, &f->down})
      for (const auto& pack : *chunks) total += pack->memory.get_desc().get_size();
#endif
  return total;
}

const PackedWeight* PackedWeights::find(const torch::Tensor& weight) const {
  const auto it = packs_.find(weight.unsafeGetTensorImpl());
  if (it == packs_.end()) return nullptr;
#if JOULE_ONEDNN
  const PackedWeight& p = *it->second;
  if (!unchanged(weight, p.source, p.version) || weight.size(0) != p.out || weight.size(1) != p.in) return nullptr;
#endif
  return it->second.get();
}

namespace {
bool batched_operand(const torch::Tensor& t) {
  return t.device().is_cpu() && t.scalar_type() == torch::kBFloat16 && t.dim() == 4;
}
}  // namespace

bool bf16_batched_matmul_applies(const torch::Tensor& a, const torch::Tensor& b) {
#if JOULE_ONEDNN
  return batched_operand(a) && batched_operand(b) &&
         !(torch::GradMode::is_enabled() && (a.requires_grad() || b.requires_grad())) && bf16_gemms_available();
#else
  (void)a, (void)b;
  return false;
#endif
}

void bf16_batched_matmul(const torch::Tensor& a, const torch::Tensor& b, const torch::Tensor& out) {
#if JOULE_ONEDNN
  RECORD_FUNCTION("joule::bf16_batched_matmul", std::vector<c10::IValue>());
  TORCH_CHECK(bf16_batched_matmul_applies(a, b) && batched_operand(out),
              "bf16_batched_matmul: 4-D bf16 CPU tensors without autograd");
  TORCH_CHECK(a.size(0) == b.size(0) && a.size(1) == b.size(1) && a.size(3) == b.size(2) &&
                  out.sizes() == torch::IntArrayRef({a.size(0), a.size(1), a.size(2), b.size(3)}),
              "bf16_batched_matmul: ", a.sizes(), " x ", b.sizes(), " into ", out.sizes());
  if (a.numel() == 0 || b.numel() == 0 || out.numel() == 0) {
    if (out.numel() > 0) out.zero_();
    return;
  }
  using dnnl::memory;
  const auto md = [](const torch::Tensor& t) {
    return memory::desc(memory::dims(t.sizes().begin(), t.sizes().end()), memory::data_type::bf16,
                        memory::dims(t.strides().begin(), t.strides().end()));
  };
  try {
    const dnnl::engine& engine = cpu_engine();
    const memory::desc a_md = md(a), b_md = md(b), c_md = md(out);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a_md, b_md, c_md), engine);
    dnnl::stream stream(engine);
    dnnl::matmul(pd).execute(stream, {{DNNL_ARG_SRC, memory(a_md, engine, a.data_ptr())},
                                      {DNNL_ARG_WEIGHTS, memory(b_md, engine, b.data_ptr())},
                                      {DNNL_ARG_DST, memory(c_md, engine, out.data_ptr())}});
    stream.wait();
  } catch (const dnnl::error& err) {
    throw joule::InternalError("oneDNN bf16 batched matmul " + c10::str(a.sizes()) + " x " + c10::str(b.sizes()) +
                               " failed: " + err.what());
  }
#else
  (void)a, (void)b, (void)out;
  throw joule::InternalError("bf16_batched_matmul: this joule was built without oneDNN");
#endif
}

torch::Tensor bf16_feed_forward(const torch::Tensor& x, const torch::Tensor& up, const torch::Tensor& up_bias,
                                const torch::Tensor& down, const torch::Tensor& down_bias,
                                const PackedWeights& packed) {
#if JOULE_ONEDNN
  RECORD_FUNCTION("joule::bf16_feed_forward", std::vector<c10::IValue>());
  const PackedFeedForward* f = packed.find_feed_forward(up, down);
  const auto bf16_vector = [](const torch::Tensor& b, int64_t n) {
    return b.defined() && b.dim() == 1 && b.size(0) == n && b.scalar_type() == torch::kBFloat16 && b.is_contiguous();
  };
  if (!f || x.scalar_type() != torch::kBFloat16 || !bf16_vector(up_bias, up.size(0)) ||
      !bf16_vector(down_bias, down.size(0)) || (torch::GradMode::is_enabled() && x.requires_grad()))
    throw joule::InternalError(
        "bf16_feed_forward: needs a bf16 input without autograd and bf16 weights and biases packed together");
  const int64_t hidden = up.size(1), chunk = f->chunk, chunks = static_cast<int64_t>(f->up.size());
  const torch::Tensor x2 = rows_of(x);
  const int64_t m = x2.size(0);
  TORCH_CHECK(x2.size(1) == hidden, "bf16_feed_forward: x has ", x2.size(1), " features, the block ", hidden);
  std::vector<int64_t> sizes = x.sizes().vec();
  torch::Tensor y = torch::empty(sizes, x2.options());
  torch::Tensor inner = torch::empty({m, chunk}, x2.options());  // one chunk's activations, reused by the next
  torch::Tensor sum = chunks > 1 ? torch::empty({m, hidden}, x2.options().dtype(torch::kFloat)) : torch::Tensor();
  const bf16* up_b = up_bias.data_ptr<bf16>();
  for (int64_t c = 0; c < chunks; ++c) {
    Epilogue e_up;
    e_up.bias = up_b + c * chunk, e_up.bias_is_bf16 = true;
    matmul_bf16({x2.data_ptr<bf16>(), false}, {up.data_ptr<bf16>(), true, f->up[c].get()}, m, chunk, hidden,
                inner.data_ptr<bf16>(), true, e_up);
    gelu_bf16_(inner);
    const bool first = c == 0, last = c + 1 == chunks;
    Epilogue e_down;
    if (first) e_down.bias = down_bias.data_ptr(), e_down.bias_is_bf16 = true;
    e_down.accumulate = !first && !last;
    if (last && !first) e_down.add = sum.data_ptr<float>();
    matmul_bf16({inner.data_ptr<bf16>(), false}, {down.data_ptr<bf16>(), true, f->down[c].get()}, m, hidden, chunk,
                last ? static_cast<void*>(y.data_ptr<bf16>()) : sum.data_ptr<float>(), last, e_down);
  }
  return y;
#else
  (void)x, (void)up, (void)up_bias, (void)down, (void)down_bias, (void)packed;
  throw joule::InternalError("bf16_feed_forward: this joule was built without oneDNN");
#endif
}

bool bf16_linear_applies(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias) {
#if JOULE_ONEDNN
  const auto fp32_or_bf16 = [](const torch::Tensor& t) {
    return t.scalar_type() == torch::kFloat || t.scalar_type() == torch::kBFloat16;
  };
  return x.device().is_cpu() && x.scalar_type() == torch::kBFloat16 && weight.device().is_cpu() &&
         fp32_or_bf16(weight) && (!bias.defined() || fp32_or_bf16(bias));
#else
  (void)x, (void)weight, (void)bias;
  return false;
#endif
}

torch::Tensor bf16_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                          Activation activation, const PackedWeights* packed) {
#if JOULE_ONEDNN
  // No bias: an empty tensor (autograd's custom functions take no undefined inputs in LibTorch 1.13).
  const torch::Tensor b = bias.defined() ? bias : torch::empty({0}, weight.options());
  const bool gelu = activation == Activation::kGelu;
  const bool records = torch::GradMode::is_enabled() &&
                       (x.requires_grad() || weight.requires_grad() || (bias.defined() && bias.requires_grad()));
  if (!records) {  // inference: the activation in the GEMM's epilogue too
    RECORD_FUNCTION(gelu ? "joule::bf16_linear_gelu" : "joule::bf16_linear", std::vector<c10::IValue>());
    const PackedWeight* pack = packed ? packed->find(weight) : nullptr;
    return linear_forward(x, rows_of(x), pack ? weight : weight.to(torch::kBFloat16).contiguous(), b, gelu, pack);
  }
  return Bf16Linear::apply(x, weight, b, gelu);
#else
  (void)x, (void)weight, (void)bias, (void)activation, (void)packed;
  throw joule::InternalError("bf16_linear: this joule was built without oneDNN");
#endif
}

}  // namespace joule::models
