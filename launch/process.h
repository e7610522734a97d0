// How a joule process starts and ends, without LibTorch (the front, tools/joule_main.cc, runs on it alone): the
// environment its OpenMP and OpenBLAS read as they load, glibc's allocator, and MPI's start, abort and rank prefix.
#pragma once

#include <string>

namespace joule::launch {

// Tunes glibc malloc so the large, repeated activation buffers of a training step are reused instead
// of being mmapped and page-faulted anew every step. Off when JOULE_MALLOC_TUNING=0.
void tune_allocator();

// Environment that OpenMP and OpenBLAS read only when they load, so it must be in place before the process starts.
// Training and the other commands: idle threads sleep instead of spinning on the cores the other ranks and the
// communicator's progress thread use (OMP_WAIT_POLICY=PASSIVE). Inference (`serving`: one process, nothing else to run
// on its cores): they spin between LibTorch's many short parallel regions, as OpenMP's default does (ACTIVE; measured
// 1.9x the throughput at batch 1 and 1.2x at batch 8 on bert-base, BENCHMARKS.md), unless its GEMMs run on OpenBLAS's
// own threads (`gemms_on_openblas_threads`: fp32 on an OpenBLAS whose kernels match the CPU), which spinning OpenMP
// threads starve (measured: 2.4 against 10.0 inferences/s, bert-base fp32, batch 8, 2 cores): PASSIVE there too.
// A long-running server (`idle_sleeps`) spins a bounded while (GOMP_SPINCOUNT=300000, a few milliseconds: far longer
// than the gaps inside a forward pass) and then sleeps: with ACTIVE alone an idle `joule serve` held a whole core
// (measured: 3.0 CPU-seconds in 3 idle seconds, 0 with the bound).
// A value the environment already gives is kept. Sets the variables the environment lacks (the front, before it
// executes the engine: tools/joule_main.cc); says whether any was missing.
bool set_thread_environment(bool serving, bool gemms_on_openblas_threads, bool idle_sleeps = false);
// The same, then, when a variable was missing, executes this program again with the same `argv` (once: the second start
// finds them set); returns when nothing was missing.
void restart_with_thread_environment(char** argv, bool serving, bool gemms_on_openblas_threads,
                                     bool idle_sleeps = false);
// The same before any library has initialized, from an ELF preinit function (tools/engine_main.cc), whose `envp` it
// reads (libc's initializer will reset the environment to it, so setenv would be lost): when a variable is missing,
// executes this program again with `envp` and the missing variables; returns when none was (or the exec failed).
// Allocates once with malloc and calls nothing that needs an initialized library.
void start_with_thread_environment(char** argv, char** envp, bool serving, bool gemms_on_openblas_threads,
                                   bool idle_sleeps = false);
// The OMP_WAIT_POLICY restart_with_thread_environment gives a process that does not set one.
const char* default_wait_policy(bool serving, bool gemms_on_openblas_threads);

// Open MPI runs a nonblocking all-reduce (MPI_Iallreduce) in coll/libnbc, which left to itself takes a binomial
// reduce + broadcast below 4 ranks and for in-place buffers: twice the ring's bytes over every link (measured on
// emulated links: half the bus bandwidth; VALIDATION.md). joule's all-reduces of 1 MiB or more are its own ring
// (collectives/mpi_communicator.cc); for the smaller ones this selects libnbc's ring unless the job's environment
// already chose (OMPI_MCA_coll_libnbc_iallreduce_algorithm). Must run before MPI_Init; other MPIs ignore the variable.
void prefer_ring_allreduce();

// Initializes MPI once with MPI_THREAD_MULTIPLE (required: the communicator's progress thread issues and tests
// every collective while the main thread may call MPI_Abort on an error, or MPI_Comm_rank for a message prefix,
// at the same time) and finalizes it at normal process exit. Error paths abort instead
// (abort_job_if_distributed), so a failing rank never blocks in MPI_Finalize. Returns the thread level provided.
int ensure_mpi_initialized();

// Under MPI with more than one rank, ends the whole job (MPI_Abort) so no rank is left waiting in a
// collective for the one that failed. A no-op otherwise. main() calls it after printing an error.
void abort_job_if_distributed(int exit_code);

// "[rank N] " when MPI runs with more than one rank, else "": the prefix of diagnostics.
std::string rank_prefix();

std::string mpi_library_version();  // MPI_Get_library_version: callable before MPI_Init

}  // namespace joule::launch
