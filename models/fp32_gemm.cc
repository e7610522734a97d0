#include "models/fp32_gemm.h"

#include <dlfcn.h>

#include <limits>
#include <string>

#include "launch/util/error.h"

#if JOULE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

namespace joule::models {
namespace {

// The Fortran BLAS interface every BLAS exports (LP64: 32-bit integers), column-major.
using BlasSgemm = void (*)(const char* trans_a, const char* trans_b, const int* m, const int* n, const int* k,
                           const float* alpha, const float* a, const int* lda, const float* b, const int* ldb,
                           const float* beta, float* c, const int* ldc);

BlasSgemm blas_sgemm() {
  static const BlasSgemm sgemm = reinterpret_cast<BlasSgemm>(dlsym(RTLD_DEFAULT, "sgemm_"));
  return sgemm;
}

int blas_int(int64_t v, const char* what) {
  if (v > std::numeric_limits<int>::max())
    throw joule::InternalError(std::string("sgemm: ") + what + " " + std::to_string(v) + " exceeds the BLAS's int");
  return static_cast<int>(v);
}

// How sgemm reads one [rows, cols] matrix of a 4-D tensor's last two dimensions: row-major ('N', rows lda apart) or
// column-major ('T': the stored matrix is its [cols, rows] transpose). False: neither dimension has unit stride.
struct Layout {
  char trans = 'N';
  int64_t ld = 1;
};

bool matrix_layout(const torch::Tensor& t, Layout* layout) {
  const int64_t rows = t.size(2), cols = t.size(3), row_stride = t.stride(2), col_stride = t.stride(3);
  if ((cols <= 1 || col_stride == 1) && (rows <= 1 || row_stride >= cols)) {
    *layout = {'N', rows <= 1 ? std::max<int64_t>(cols, 1) : row_stride};
    return true;
  }
  if ((rows <= 1 || row_stride == 1) && (cols <= 1 || col_stride >= rows)) {
    *layout = {'T', cols <= 1 ? std::max<int64_t>(rows, 1) : col_stride};
    return true;
  }
  return false;
}

// c[b, h] = a[b, h] b[b, h] for every [b, h], into c's storage as it lies (c's matrices row- or column-major).
void multiply_into(launch::Fp32Gemm gemm, torch::Tensor a, torch::Tensor b, const torch::Tensor& c) {
  Layout out;
  TORCH_CHECK(matrix_layout(c, &out), "fp32_batched_matmul: an output without a unit-stride dimension");
  if (out.trans == 'T') {  // c^T = b^T a^T, row-major
    multiply_into(gemm, b.transpose(2, 3), a.transpose(2, 3), c.transpose(2, 3));
    return;
  }
  const int64_t batch = c.size(0), heads = c.size(1), m = c.size(2), n = c.size(3), k = a.size(3);
  if (k == 0) {  // an empty sum (and no matrix for sgemm to check the strides of)
    c.zero_();
    return;
  }
  Layout la, lb;
  if (!matrix_layout(a, &la)) {
    a = a.contiguous();
    matrix_layout(a, &la);
  }
  if (!matrix_layout(b, &lb)) {
    b = b.contiguous();
    matrix_layout(b, &lb);
  }
  const float *pa = a.data_ptr<float>(), *pb = b.data_ptr<float>();
  float* pc = c.data_ptr<float>();
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t h = 0; h < heads; ++h)
      sgemm_row_major(gemm, la.trans, lb.trans, m, n, k, 1.0f, pa + i * a.stride(0) + h * a.stride(1), la.ld,
                      pb + i * b.stride(0) + h * b.stride(1), lb.ld, 0.0f, pc + i * c.stride(0) + h * c.stride(1),
                      out.ld);
}

struct Fp32Linear : public torch::autograd::Function<Fp32Linear> {
  // `bias`: [out], or empty for none (a custom function takes no undefined inputs in LibTorch 1.13).
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, const torch::Tensor& bias, int64_t gemm) {
    RECORD_FUNCTION("joule::fp32_linear", std::vector<c10::IValue>());
    const auto path = static_cast<launch::Fp32Gemm>(gemm);
    const torch::Tensor x2 = x.reshape({-1, x.size(-1)}).contiguous(), w = weight.contiguous();
    const int64_t m = x2.size(0), k = x2.size(1), n = w.size(0);
    TORCH_CHECK(w.size(1) == k, "fp32_linear: x has ", k, " features, the weight ", w.size(1));
    const bool has_bias = bias.numel() > 0;
    std::vector<int64_t> sizes = x.sizes().vec();  // y: x's shape with the last dimension n, in storage of its own
    sizes.back() = n;                              // (a custom function's output must not be a view)
    torch::Tensor y = torch::empty(sizes, x2.options());
    // Not bias.expand(sizes).contiguous(): with one row that is the bias itself, and the GEMM would add into it.
    if (has_bias) y.copy_(bias.expand(sizes));
    sgemm_row_major(path, 'N', 'T', m, n, k, 1.0f, x2.data_ptr<float>(), k, w.data_ptr<float>(), k,
                    has_bias ? 1.0f : 0.0f, y.data_ptr<float>(), n);
    ctx->save_for_backward({x2, w});
    ctx->saved_data["weight"] = weight;  // the parameter, whose .grad backward adds into
    ctx->saved_data["x_sizes"] = x.sizes().vec();
    ctx->saved_data["has_bias"] = has_bias;
    ctx->saved_data["gemm"] = gemm;
    return y;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    RECORD_FUNCTION("joule::fp32_linear_backward", std::vector<c10::IValue>());
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x2 = saved[0], &w = saved[1];
    const auto path = static_cast<launch::Fp32Gemm>(ctx->saved_data["gemm"].toInt());
    const int64_t m = x2.size(0), k = x2.size(1), n = w.size(0);
    const torch::Tensor dy = grads[0].reshape({m, n}).contiguous();
    torch::Tensor dx, dw, db;
    if (ctx->needs_input_grad(0)) {
      dx = torch::empty(ctx->saved_data["x_sizes"].toIntVector(), dy.options());
      sgemm_row_major(path, 'N', 'N', m, k, n, 1.0f, dy.data_ptr<float>(), n, w.data_ptr<float>(), k, 0.0f,
                      dx.data_ptr<float>(), k);
    }
    if (ctx->needs_input_grad(1)) {
      const torch::Tensor weight = ctx->saved_data["weight"].toTensor();
      const torch::Tensor grad = gradient_to_write_into(weight);
      const bool into_grad = grad.defined();
      torch::Tensor out = into_grad ? grad : torch::empty({n, k}, dy.options());
      const float beta = into_grad && !take_zero_gradient(grad) ? 1.0f : 0.0f;
      sgemm_row_major(path, 'T', 'N', n, k, m, 1.0f, dy.data_ptr<float>(), n, x2.data_ptr<float>(), k, beta,
                      out.data_ptr<float>(), k);
      if (!into_grad) dw = out;
    }
    if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(2)) db = dy.sum(0);
    return {dx, dw, db, torch::Tensor()};
  }
};

// out [B, H, m, n] (kHeadsFirst) or [B, m, H, n] (kHeadsLast), and its [B, H, m, n] view.
std::pair<torch::Tensor, torch::Tensor> new_output(const torch::Tensor& a, const torch::Tensor& b, HeadsOut layout) {
  const int64_t batch = a.size(0), heads = a.size(1), m = a.size(2), n = b.size(3);
  if (layout == HeadsOut::kHeadsFirst) {
    torch::Tensor out = torch::empty({batch, heads, m, n}, a.options());
    return {out, out};
  }
  torch::Tensor out = torch::empty({batch, m, heads, n}, a.options());
  return {out, out.transpose(1, 2)};
}

struct BatchedMatmul : public torch::autograd::Function<BatchedMatmul> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& a, const torch::Tensor& b,
                               int64_t gemm, bool heads_last) {
    RECORD_FUNCTION("joule::fp32_batched_matmul", std::vector<c10::IValue>());
    const auto [out, per_head] = new_output(a, b, heads_last ? HeadsOut::kHeadsLast : HeadsOut::kHeadsFirst);
    multiply_into(static_cast<launch::Fp32Gemm>(gemm), a, b, per_head);
    ctx->save_for_backward({a, b});
    ctx->saved_data["gemm"] = gemm;
    ctx->saved_data["heads_last"] = heads_last;
    return out;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    RECORD_FUNCTION("joule::fp32_batched_matmul_backward", std::vector<c10::IValue>());
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &a = saved[0], &b = saved[1];
    const auto gemm = static_cast<launch::Fp32Gemm>(ctx->saved_data["gemm"].toInt());
    const torch::Tensor g = ctx->saved_data["heads_last"].toBool() ? grads[0].transpose(1, 2) : grads[0];
    torch::Tensor da, db;
    if (ctx->needs_input_grad(0)) {  // da = g b^T, in a's layout
      da = torch::empty_like(a);
      multiply_into(gemm, g, b.transpose(2, 3), da);
    }
    if (ctx->needs_input_grad(1)) {  // db = a^T g, in b's layout
      db = torch::empty_like(b);
      multiply_into(gemm, a.transpose(2, 3), g, db);
    }
    return {da, db, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

bool fp32_blas_sgemm_available() { return blas_sgemm() != nullptr; }

bool sgemm_on(launch::Fp32Gemm gemm) { return gemm == launch::Fp32Gemm::kOnednn || fp32_blas_sgemm_available(); }

void sgemm_row_major(launch::Fp32Gemm gemm, char trans_a, char trans_b, int64_t m, int64_t n, int64_t k, float alpha,
                     const float* a, int64_t lda, const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  // Named only in errors: this runs for every head of every attention product.
  const auto shape = [&] { return std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k); };
  if (gemm == launch::Fp32Gemm::kOnednn) {
#if JOULE_ONEDNN
    const dnnl_status_t status = dnnl_sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
    if (status != dnnl_success)
      throw joule::InternalError("oneDNN sgemm " + shape() + " failed (dnnl_status_t " +
                                 std::to_string(static_cast<int>(status)) + ")");
    return;
#else
    throw joule::Error("fp32 GEMMs on oneDNN: this joule was built without oneDNN (JOULE_ONEDNN=OFF)",
                       "set train.fp32_gemm to blas or auto");
#endif
  }
  const BlasSgemm sgemm = blas_sgemm();
  if (!sgemm) throw joule::InternalError("sgemm " + shape() + ": no BLAS sgemm_ in this process");
  // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T: the same storage, the operands swapped.
  const int bm = blas_int(n, "n"), bn = blas_int(m, "m"), bk = blas_int(k, "k");
  const int blda = blas_int(ldb, "ldb"), bldb = blas_int(lda, "lda"), bldc = blas_int(ldc, "ldc");
  sgemm(&trans_b, &trans_a, &bm, &bn, &bk, &alpha, b, &blda, a, &bldb, &beta, c, &bldc);
}

bool fp32_linear_applies(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                         launch::Fp32Gemm gemm) {
  const auto fp32_cpu = [](const torch::Tensor& t) { return t.scalar_type() == torch::kFloat && t.device().is_cpu(); };
  return sgemm_on(gemm) && x.dim() >= 1 && weight.dim() == 2 && fp32_cpu(x) && fp32_cpu(weight) &&
         (!bias.defined() || (fp32_cpu(bias) && bias.dim() == 1));
}

torch::Tensor fp32_linear(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                          launch::Fp32Gemm gemm) {
  TORCH_CHECK(fp32_linear_applies(x, weight, bias, gemm), "fp32_linear: x ", x.sizes(), " and weight ", weight.sizes(),
              " are not fp32 CPU operands of a Linear layer on ", launch::fp32_gemm_name(gemm));
  return Fp32Linear::apply(x, weight, bias.defined() ? bias : torch::empty({0}, x.options()),
                           static_cast<int64_t>(gemm));
}

bool batched_matmul_shapes_apply(const torch::Tensor& a, const torch::Tensor& b, launch::Fp32Gemm gemm) {
  return sgemm_on(gemm) && a.dim() == 4 && b.dim() == 4 && a.device().is_cpu() && b.device().is_cpu() &&
         a.size(0) == b.size(0) && a.size(1) == b.size(1) && a.size(3) == b.size(2);
}

bool fp32_batched_matmul_applies(const torch::Tensor& a, const torch::Tensor& b, launch::Fp32Gemm gemm) {
  return a.scalar_type() == torch::kFloat && b.scalar_type() == torch::kFloat &&
         batched_matmul_shapes_apply(a, b, gemm);
}

torch::Tensor fp32_batched_matmul(const torch::Tensor& a, const torch::Tensor& b, launch::Fp32Gemm gemm, HeadsOut out) {
  TORCH_CHECK(fp32_batched_matmul_applies(a, b, gemm), "fp32_batched_matmul: operands ", a.sizes(), " and ", b.sizes(),
              " (", a.scalar_type(), ", ", b.scalar_type(), ") are not 4-D fp32 CPU matrices to multiply");
  return BatchedMatmul::apply(a, b, static_cast<int64_t>(gemm), out == HeadsOut::kHeadsLast);
}

}  // namespace joule::models
