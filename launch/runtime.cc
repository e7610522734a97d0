#include "launch/runtime.h"

#include <ATen/Version.h>
#include "launch/blas_core.h"
#include "launch/util/error.h"

#include <dlfcn.h>

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include <torch/torch.h>
#if JOULE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

namespace joule::launch {

BlasInfo detect_blas() {
  BlasInfo info;
  info.library = "unknown";
  if (void* sgemm = dlsym(RTLD_DEFAULT, "sgemm_")) {
    Dl_info dl{};
    if (dladdr(sgemm, &dl) && dl.dli_fname) {
      // libblas.so.3 is usually an update-alternatives link: name what it points to.
      char resolved[PATH_MAX];
      info.library = realpath(dl.dli_fname, resolved) ? resolved : dl.dli_fname;
    }
  }
  using GetConfig = char* (*)();
  using GetThreads = int (*)();
  auto get_config = reinterpret_cast<GetConfig>(dlsym(RTLD_DEFAULT, "openblas_get_config"));
  auto get_threads = reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"));
  auto get_core = reinterpret_cast<GetConfig>(dlsym(RTLD_DEFAULT, "openblas_get_corename"));
  const bool sgemm_from_openblas = info.library.find("openblas") != std::string::npos;
  if (get_config && sgemm_from_openblas) {
    info.description = get_config();
    if (get_threads) info.threads = get_threads();
    if (get_core) info.core = get_core();
  } else if (info.library.find("/blas/") != std::string::npos || info.library.find("libblas.so") != std::string::npos) {
    info.description = "reference BLAS (netlib)";
    info.is_reference = true;
  } else if (at::show_config().find("BLAS_INFO=mkl") != std::string::npos) {
    // PyPI's wheels (and GPU images built from them) link Intel MKL into libtorch_cpu, with its symbols hidden.
    info.description = "Intel MKL, built into LibTorch";
  } else {
    info.description = "unrecognized BLAS";
  }
  return info;
}

BlasCoreJudgement judge_detected_blas(const BlasInfo& blas) {
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  return judge_blas_core(blas.core, CpuIsa::current(), coretype ? coretype : "");
}

std::string fp32_gemm_kernels(const BlasInfo& blas) {
  const BlasCoreJudgement core = judge_detected_blas(blas);
  return core.text.empty() ? blas.description : core.text;
}

bool onednn_available() {
#if JOULE_ONEDNN
  return true;
#else
  return false;
#endif
}

namespace {

// GFLOP/s of `gemm` (2*m*n*k FLOP): the best of three after one untimed call, in this thread's CPU time (other
// processes on the core do not count; one thread, so CPU time is the GEMM's time).
template <typename Fn>
double gflops(double flop, Fn gemm) {
  gemm();
  double best = 0;
  for (int i = 0; i < 3; ++i) {
    const double t0 = thread_cpu_seconds();
    gemm();
    const double s = thread_cpu_seconds() - t0;
    if (s > 0) best = std::max(best, flop / s / 1e9);
  }
  return best;
}

#if JOULE_ONEDNN
std::string onednn_isa_name() {
  switch (dnnl_get_effective_cpu_isa()) {
    case dnnl_cpu_isa_sse41:
      return "sse41";
    case dnnl_cpu_isa_avx:
      return "avx";
    case dnnl_cpu_isa_avx2:
      return "avx2";
    case dnnl_cpu_isa_avx2_vnni:
      return "avx2_vnni";
    case dnnl_cpu_isa_avx512_core:
      return "avx512_core";
    case dnnl_cpu_isa_avx512_core_vnni:
      return "avx512_core_vnni";
    case dnnl_cpu_isa_avx512_core_bf16:
      return "avx512_core_bf16";
    case dnnl_cpu_isa_avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "other";
  }
}
#endif

// The calibration GEMM: a BERT-sized projection, 256 tokens x 1024 inputs x 1024 outputs (0.54 GFLOP).
GemmRates measure_gemm_rates() {
  constexpr int64_t m = 256, k = 1024, n = 1024;
  const double flop = 2.0 * m * n * k;
  torch::NoGradGuard no_grad;
  // y = a b^T, as a Linear layer. Operands from sin/cos, not the global generator: a run's random streams do not
  // depend on whether or how often it calibrated.
  const torch::Tensor a = torch::sin(torch::arange(m * k, torch::kFloat)).reshape({m, k});
  const torch::Tensor b = torch::cos(torch::arange(n * k, torch::kFloat) * 0.37).reshape({n, k});
  torch::Tensor blas_out;
  GemmRates r;
  r.blas_fp32 = gflops(flop, [&] { blas_out = torch::mm(a, b.t()); });
#if JOULE_ONEDNN
  torch::Tensor dnnl_out = torch::empty({m, n});
  r.onednn_fp32 = gflops(flop, [&] {
    dnnl_sgemm('N', 'T', m, n, k, 1.0f, a.data_ptr<float>(), k, b.data_ptr<float>(), k, 0.0f,
               dnnl_out.data_ptr<float>(), n);
  });
  r.onednn_fp32_difference =
      (dnnl_out - blas_out).abs().max().item<double>() / std::max(blas_out.abs().max().item<double>(), 1e-30);
  r.onednn_isa = onednn_isa_name();
#endif
  if (CpuIsa::current().native_bf16()) {  // emulated bf16 is not a path anyone takes
    const torch::Tensor a16 = a.to(torch::kBFloat16), b16 = b.to(torch::kBFloat16);
    r.onednn_bf16 = gflops(flop, [&] { torch::mm(a16, b16.t()); });
  }
  return r;
}

}  // namespace

std::string GemmPath::line() const {
  return gemm_line(choice, rates, blas, blas_description, CpuIsa::current(), clock_ghz);
}

GemmPath choose_gemm_path(Fp32GemmSetting setting) {
  GemmPath p;
  const BlasInfo info = detect_blas();
  p.blas = judge_detected_blas(info);
  p.blas_description = info.description;
  struct RestoreThreads {  // LibTorch's (OpenMP's) and OpenBLAS's counts as they were
    int torch = torch::get_num_threads(), openblas = 0;
    RestoreThreads() {
      using GetThreads = int (*)();
      if (auto get = reinterpret_cast<GetThreads>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"))) openblas = get();
    }
    ~RestoreThreads() {
      torch::set_num_threads(torch);
      using SetThreads = void (*)(int);
      if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads")); set && openblas > 0)
        set(openblas);
    }
  };
  {
    const RestoreThreads restore;
    set_threads(1);
    p.rates = measure_gemm_rates();
  }
  p.clock_ghz = core_clock_ghz();
  p.choice = choose_fp32_gemm(setting, p.blas, p.rates);
  return p;
}

void set_threads(int threads) {
  if (threads < 1) threads = 1;
  torch::set_num_threads(threads);
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(threads);
}

std::string torch_version() {
#ifdef TORCH_VERSION
  return TORCH_VERSION;
#else
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
         std::to_string(TORCH_VERSION_PATCH);
#endif
}

}  // namespace joule::launch
