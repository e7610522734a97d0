// joule-engine: every command of the table (tools/cli/command.h), with LibTorch loaded. The front (tools/joule_main.cc)
// executes it for the commands that need LibTorch, with their thread environment set; run directly (and as the tests'
// joule-fault-injection), it sets that up itself. Finds the command, sets up the process for it, runs it, and turns
// any error into one message with its "what to do" on every rank.
#include "launch/cpu_allocator.h"
#include "launch/process.h"
#include "launch/util/file_io.h"
#include "tools/cli/command.h"
#include "tools/cli/dispatch.h"
#include "tools/cli/engine.h"
#include "trainer/fault.h"

namespace {

// The process's first code: the ELF preinit array runs it before any shared library has initialized. A training
// command missing its thread environment starts over here, so the restart costs only the loading of the libraries
// (about 0.25 s on a Zen 3), not their initializers (LibTorch's operator registration) too: 0.80 s against 1.06 s for
// a whole `joule train` refusal (a process given the environment: 0.55 s). It may only read constant data: libc's own
// initializer has not run, so getenv and setenv do not work yet. A serving command's wait policy depends on where its
// GEMMs run, which only its loaded BLAS can tell: main() decides it and starts over when it was missing.
void set_training_thread_environment(int argc, char** argv, char** envp) {
  const joule::cli::Command* command = joule::cli::find_command(argc - 1, argv + 1);
  if (command && command->runtime == joule::cli::ThreadRuntime::training)
    joule::launch::start_with_thread_environment(argv, envp, /*serving=*/false, /*gemms_on_openblas_threads=*/false);
}
__attribute__((section(".preinit_array"),
               used)) void (*preinit_thread_environment)(int, char**, char**) = set_training_thread_environment;

}  // namespace

int main(int argc, char** argv) {
#ifdef JOULE_FAULT_INJECTION
  joule::trainer::enable_fault_injection();  // the test binary joule-fault-injection: JOULE_FAULT acts (fault.h)
#endif
  int exit_code = 0;
  const joule::cli::Command* command = joule::cli::find_or_answer(argc, argv, exit_code);
  if (!command) return exit_code;
  const joule::cli::Handler handler = joule::cli::engine_handler(*command);
  if (!handler)  // the table names a command that no handler serves: a build error, which a test catches first
    return joule::cli::report_error(command->name, "joule-engine has no handler for this command",
                                    "report this as a bug in joule", 1);
  const int words = joule::cli::name_words(*command);
  // OpenMP and OpenBLAS read their wait policies only when they load: a serving process starts over once with them
  // set (a training one did before its libraries initialized, above; executed by the front, it finds them set). The
  // commands that read and write files run no parallel work worth a second start.
  using joule::cli::ThreadRuntime;
  if (command->runtime != ThreadRuntime::none) {
    const bool serving = command->runtime == ThreadRuntime::serving || command->runtime == ThreadRuntime::service;
    joule::launch::restart_with_thread_environment(
        argv, serving, serving && joule::cli::serving_gemms_on_openblas(argc - words, argv + words),
        command->runtime == ThreadRuntime::service);
  }
  joule::remove_temporaries_on_signals();  // SIGTERM mid-write leaves no OUT.tmp.PID; SIGXFSZ is an error
  joule::launch::tune_allocator();
  joule::launch::install_caching_cpu_allocator();
  return joule::cli::run_command(*command, handler, argc - words, argv + words);
}
