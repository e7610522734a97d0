#include "launch/runtime.h"

#include <ATen/Version.h>
#include "launch/blas_core.h"
#include "launch/util/error.h"

#include <dlfcn.h>
#include <malloc.h>
#include <mpi.h>
#include <sched.h>

#include <climits>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include <torch/torch.h>

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

std::string fp32_gemm_kernels(const BlasInfo& blas) {
  const char* coretype = std::getenv("OPENBLAS_CORETYPE");
  const BlasCoreJudgement core = judge_blas_core(blas.core, CpuIsa::current(), coretype ? coretype : "");
  return core.text.empty() ? blas.description : core.text;
}

void set_threads(int threads) {
  if (threads < 1) threads = 1;
  torch::set_num_threads(threads);
  using SetThreads = void (*)(int);
  if (auto set = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(threads);
}

void tune_allocator() {
  const char* env = std::getenv("JOULE_MALLOC_TUNING");
  if (env && std::strcmp(env, "0") == 0) return;
  // Serve large blocks from the heap and keep freed memory: a step reallocates the same sizes.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 64 << 20);
}

bool set_runtime_environment() {
  bool changed = false;
  auto set_default = [&](const char* name, const char* value) {
    if (!std::getenv(name)) {
      setenv(name, value, 0);
      changed = true;
    }
  };
  set_default("OMP_WAIT_POLICY", "PASSIVE");
  set_default("OPENBLAS_THREAD_TIMEOUT", "4");
  return changed;
}

namespace {
struct MpiFinalizer {
  bool owns = false;
  ~MpiFinalizer() {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owns && !finalized) MPI_Finalize();
  }
};
MpiFinalizer mpi_finalizer;
}  // namespace

void prefer_ring_allreduce() { setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", /*overwrite=*/0); }

int ensure_mpi_initialized() {
  int initialized = 0, provided = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    prefer_ring_allreduce();
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
    mpi_finalizer.owns = true;
  } else {
    MPI_Query_thread(&provided);
  }
  if (provided < MPI_THREAD_MULTIPLE)
    throw joule::Error("MPI provides thread level " + std::to_string(provided) + ", joule needs MPI_THREAD_MULTIPLE (" +
                           std::to_string(MPI_THREAD_MULTIPLE) +
                           "): the communicator's progress thread runs MPI calls while the "
                           "main thread may call MPI_Abort or query the rank",
                       "use an MPI built with thread support (Debian's Open MPI provides MPI_THREAD_MULTIPLE)");
  return provided;
}

void abort_job_if_distributed(int exit_code) {
  int initialized = 0, finalized = 0, size = 1;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size > 1) MPI_Abort(MPI_COMM_WORLD, exit_code);
}

std::string rank_prefix() {
  int initialized = 0, finalized = 0, size = 1, rank = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) return "";
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return size > 1 ? "[rank " + std::to_string(rank) + "] " : "";
}

std::string torch_version() {
#ifdef TORCH_VERSION
  return TORCH_VERSION;
#else
  return std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR) + "." +
         std::to_string(TORCH_VERSION_PATCH);
#endif
}

std::string mpi_library_version() {
  char buf[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(buf, &len);
  std::string s(buf, static_cast<size_t>(len));
  if (auto nl = s.find_first_of("\r\n,"); nl != std::string::npos) s.resize(nl);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\0')) s.pop_back();
  return s;
}

std::vector<int> affinity_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> ids;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return ids;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) ids.push_back(c);
  return ids;
}

int physical_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return 1;
}

}  // namespace joule::launch
