#include "launch/process.h"

#include <malloc.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "launch/util/error.h"

namespace joule::launch {

void tune_allocator() {
  const char* env = std::getenv("JOULE_MALLOC_TUNING");
  if (env && std::strcmp(env, "0") == 0) return;
  // Serve large blocks from the heap and keep freed memory: a step reallocates the same sizes.
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  mallopt(M_TOP_PAD, 64 << 20);
}

const char* default_wait_policy(bool serving, bool gemms_on_openblas_threads) {
  return serving && !gemms_on_openblas_threads ? "ACTIVE" : "PASSIVE";
}

namespace {

struct ThreadVariable {
  const char* name;
  const char* value;
};
// The variables of a process of this kind, with joule's values; returns how many (at most 3).
int thread_variables(bool serving, bool gemms_on_openblas_threads, bool idle_sleeps, ThreadVariable (&out)[3]) {
  int n = 0;
  out[n++] = {"OMP_WAIT_POLICY", default_wait_policy(serving, gemms_on_openblas_threads)};
  out[n++] = {"OPENBLAS_THREAD_TIMEOUT", "4"};
  if (idle_sleeps) out[n++] = {"GOMP_SPINCOUNT", "300000"};
  return n;
}

bool has_variable(char** envp, const char* name) {
  const size_t length = std::strlen(name);
  for (char** e = envp; *e; ++e)
    if (std::strncmp(*e, name, length) == 0 && (*e)[length] == '=') return true;
  return false;
}

}  // namespace

bool set_thread_environment(bool serving, bool gemms_on_openblas_threads, bool idle_sleeps) {
  ThreadVariable variables[3];
  bool changed = false;
  for (int i = 0, n = thread_variables(serving, gemms_on_openblas_threads, idle_sleeps, variables); i < n; ++i)
    if (!std::getenv(variables[i].name)) {
      setenv(variables[i].name, variables[i].value, 0);
      changed = true;
    }
  return changed;
}

void restart_with_thread_environment(char** argv, bool serving, bool gemms_on_openblas_threads, bool idle_sleeps) {
  if (set_thread_environment(serving, gemms_on_openblas_threads, idle_sleeps))
    execv("/proc/self/exe", argv);  // returns only if the exec failed: run on, as before
}

void start_with_thread_environment(char** argv, char** envp, bool serving, bool gemms_on_openblas_threads,
                                   bool idle_sleeps) {
  ThreadVariable variables[3];
  const int n = thread_variables(serving, gemms_on_openblas_threads, idle_sleeps, variables);
  size_t count = 0, text_bytes = 0;
  while (envp[count]) ++count;
  for (int i = 0; i < n; ++i) text_bytes += std::strlen(variables[i].name) + std::strlen(variables[i].value) + 2;
  // The new array and its "NAME=value" strings in one block, freed only where the exec fails.
  char** env = static_cast<char**>(std::malloc((count + n + 1) * sizeof(char*) + text_bytes));
  if (!env) return;
  std::memcpy(env, envp, count * sizeof(char*));
  char* text = reinterpret_cast<char*>(env + count + n + 1);
  size_t k = count;
  for (int i = 0; i < n; ++i) {
    if (has_variable(envp, variables[i].name)) continue;
    env[k++] = text;
    text = stpcpy(stpcpy(stpcpy(text, variables[i].name), "="), variables[i].value) + 1;
  }
  env[k] = nullptr;
  if (k > count) execve("/proc/self/exe", argv, env);  // returns only if the exec failed: run on
  std::free(env);
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

std::string mpi_library_version() {
  char buf[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(buf, &len);
  std::string s(buf, static_cast<size_t>(len));
  if (auto nl = s.find_first_of("\r\n,"); nl != std::string::npos) s.resize(nl);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\0')) s.pop_back();
  return s;
}

}  // namespace joule::launch
