// joule: the command-line glue. Finds the command in the table (tools/cli/command.h), sets up the process for it,
// runs it, and turns any error into one message with its "what to do" on every rank.
#include <cstring>
#include <exception>
#include <filesystem>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "launch/cpu_allocator.h"
#include "launch/process.h"
#include "launch/runtime.h"
#include "launch/util/error.h"
#include "launch/util/file_io.h"
#include "tools/cli/command.h"
#include "tools/cli/flags.h"
#include "trainer/fault.h"

namespace {

// Prints an error and its "what to do" on every rank (one write per message, so lines from different ranks do not
// interleave), ends the whole job so that no rank is left waiting, and returns the exit code.
int report_error(const std::string& cmd, std::string what, std::string hint, int exit_code) {
  const std::string prefix = joule::launch::rank_prefix();
  // LibTorch's errors carry their C++ backtrace after the message: the message is what the user needs.
  if (const size_t trace = what.find("\nException raised from "); trace != std::string::npos) what.resize(trace);
  // nlohmann's errors open with their id ("[json.exception.type_error.316] "): the words after it are the message.
  if (what.rfind("[json.exception.", 0) == 0) what.erase(0, what.find("] ") + 2);
  if (const size_t placeholder = hint.find("joule COMMAND"); placeholder != std::string::npos)
    hint.replace(placeholder, 13, "joule " + cmd);
  std::cerr << (prefix + "joule " + cmd + ": error: " + what + "\n" + prefix + "what to do: " + hint + "\n")
            << std::flush;
  joule::launch::abort_job_if_distributed(exit_code);
  return exit_code;
}

const char* const kOutOfMemoryHint =
    "give the command less to hold at once (a smaller --batch, --micro-batch, --seq-len or --max-length), or run it "
    "on a machine with more memory";

// Runs the command, mapping each kind of exception to one message and an exit code (usage 2, runtime 1).
int run_command(const joule::cli::Command& command, int argc, char** argv) {
  const std::string cmd = command.name;
  try {
    return command.run(argc, argv);
  } catch (const joule::cli::HelpRequested& help) {
    std::cout << help.text << std::flush;
    return 0;
  } catch (const cxxopts::exceptions::exception& e) {
    // cxxopts's wording ("Option ‘bogus’ does not exist"), in joule's error form with plain quotes.
    std::string what = e.what();
    for (const char* quote : {"\u2018", "\u2019"})
      for (size_t at; (at = what.find(quote)) != std::string::npos;) what.replace(at, std::strlen(quote), "'");
    return report_error(cmd, what, "see `joule " + cmd + " --help` for the flags and their values", 2);
  } catch (const joule::Error& e) {
    return report_error(cmd, e.what(), e.hint(), e.exit_code());
  } catch (const std::filesystem::filesystem_error& e) {
    // A file system call that joule did not check itself: still the path and the cause, not the library's wording.
    std::string what = e.path1().string() + ": " + e.code().message();
    if (!e.path2().empty()) what += " (and " + e.path2().string() + ")";
    return report_error(cmd, what, "check the path, its permissions and the free space, then rerun", 1);
  } catch (const std::bad_alloc&) {
    return report_error(cmd, "out of memory (an allocation failed)", kOutOfMemoryHint, 1);
  } catch (const std::exception& e) {
    // Not joule's own error type (LibTorch, the standard library): still one clear line on every rank.
    const std::string what = e.what();
    if (what.find("Cannot allocate memory") != std::string::npos ||
        what.find("can't allocate memory") != std::string::npos)
      return report_error(cmd, "out of memory: " + what, kOutOfMemoryHint, 1);  // LibTorch's allocators' words
    return report_error(cmd, what,
                        "this error did not come with advice from joule; the message above names what failed", 1);
  }
}

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
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    std::cout << joule::cli::usage();
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--list-commands") {  // one name a line: what the tests that walk every command iterate
    for (const joule::cli::Command& c : joule::cli::commands()) std::cout << c.name << "\n";
    return 0;
  }
  const joule::cli::Command* command = joule::cli::find_command(argc - 1, argv + 1);
  if (!command) {
    if (const std::string group = joule::cli::group_commands(args[0]); !group.empty())  // `joule data` alone
      return report_error(args[0], "'" + args[0] + "' needs one of its commands: " + group,
                          "run e.g. `joule " + group.substr(0, group.find(',')) + " --help`", 2);
    const bool two = args.size() > 1 && args[1].rfind('-', 0) != 0;
    std::cerr << "joule: unknown command '" << args[0] << (two ? " " + args[1] : "") << "'\n\n" << joule::cli::usage();
    return 2;
  }
  const int words = std::strchr(command->name, ' ') ? 2 : 1;
  // OpenMP and OpenBLAS read their wait policies only when they load: a serving process starts over once with them
  // set (a training one did before its libraries initialized, above). The data commands run no LibTorch or BLAS work,
  // and a second start would double their start-up.
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
  return run_command(*command, argc - words, argv + words);
}
