// joule, the front: loads no LibTorch. Answers the usage, runs the commands whose work needs no LibTorch (reports,
// plans, the data commands) itself, and for the others reads the command line as the engine will (refusing a bad one)
// and executes joule-engine beside it (tools/cli/command.h), with a training command's thread environment set, so that
// the engine loads its libraries once. A refusal costs milliseconds; LibTorch alone takes about 0.6 s to load on a Zen
// 3 (Debian's pulls in ~300 libraries).
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <string>
#include <system_error>

#include "launch/process.h"
#include "launch/util/file_io.h"
#include "tools/cli/command.h"
#include "tools/cli/dispatch.h"

namespace {

// Executes joule-engine, beside this executable, with the same command line; returns only when that failed.
int execute_engine(const joule::cli::Command& command, char** argv) {
  // OpenMP and OpenBLAS read these as they load: set here, the engine need not start twice. A serving command's
  // depend on where its GEMMs run, which only the engine's loaded BLAS can tell: it sets those itself.
  if (command.runtime == joule::cli::ThreadRuntime::training)
    joule::launch::set_thread_environment(/*serving=*/false, /*gemms_on_openblas_threads=*/false);
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::string engine = ((ec ? std::filesystem::path(argv[0]) : self).parent_path() / "joule-engine").string();
  execv(engine.c_str(), argv);
  return joule::cli::report_error(command.name, engine + ": cannot start joule's engine: " + std::strerror(errno),
                                  "joule-engine is built with joule and must sit beside it: rebuild (bash "
                                  "tools/build.sh), or copy both executables together",
                                  1);
}

}  // namespace

int main(int argc, char** argv) {
  int exit_code = 0;
  const joule::cli::Command* command = joule::cli::find_or_answer(argc, argv, exit_code);
  if (!command) return exit_code;
  const int words = joule::cli::name_words(*command);
  if (command->run == joule::cli::kEngine) {
    // Refused here in milliseconds, as the engine would refuse it after loading LibTorch.
    if (!joule::cli::passes_door(*command, argc - words, argv + words, exit_code)) return exit_code;
    return execute_engine(*command, argv);
  }
  joule::remove_temporaries_on_signals();  // SIGTERM mid-write leaves no OUT.tmp.PID; SIGXFSZ is an error
  joule::launch::tune_allocator();
  return joule::cli::run_command(*command, command->run, argc - words, argv + words);
}
