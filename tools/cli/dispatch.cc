#include "tools/cli/dispatch.h"

#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <iostream>
#include <new>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "launch/process.h"
#include "launch/util/error.h"
#include "tools/cli/flags.h"

namespace joule::cli {

int report_error(const std::string& cmd, std::string what, std::string hint, int exit_code) {
  const std::string prefix = launch::rank_prefix();
  // LibTorch's errors carry their C++ backtrace after the message: the message is what the user needs.
  if (const size_t trace = what.find("\nException raised from "); trace != std::string::npos) what.resize(trace);
  // nlohmann's errors open with their id ("[json.exception.type_error.316] "): the words after it are the message.
  if (what.rfind("[json.exception.", 0) == 0) what.erase(0, what.find("] ") + 2);
  if (const size_t placeholder = hint.find("joule COMMAND"); placeholder != std::string::npos)
    hint.replace(placeholder, 13, "joule " + cmd);
  std::cerr << (prefix + "joule " + cmd + ": error: " + what + "\n" + prefix + "what to do: " + hint + "\n")
            << std::flush;
  launch::abort_job_if_distributed(exit_code);
  return exit_code;
}

namespace {

const char* const kOutOfMemoryHint =
    "give the command less to hold at once (a smaller --batch, --micro-batch, --seq-len or --max-length), or run it "
    "on a machine with more memory";

// Runs `body`, turning each kind of exception into one message and an exit code (run_command).
int guarded(const std::string& cmd, const std::function<int()>& body) {
  try {
    return body();
  } catch (const HelpRequested& help) {
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

}  // namespace

int run_command(const Command& command, Handler handler, int argc, char** argv) {
  return guarded(command.name, [&] { return handler(argc, argv); });
}

bool passes_door(const Command& command, int argc, char** argv, int& exit_code) {
  std::vector<char*> copy(argv, argv + argc);  // a door may take flags out of its argv (take_flag_values)
  copy.push_back(nullptr);
  bool passed = false;
  say_notes(false);
  exit_code = guarded(command.name, [&] {
    command.door(argc, copy.data());
    passed = true;
    return 0;
  });
  say_notes(true);
  return passed;
}

const Command* find_or_answer(int argc, char** argv, int& exit_code) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  exit_code = 0;
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    std::cout << usage();
    exit_code = args.empty() ? 2 : 0;
    return nullptr;
  }
  if (args[0] == "--list-commands") {  // one name a line: what the tests that walk every command iterate
    for (const Command& c : commands()) std::cout << c.name << "\n";
    return nullptr;
  }
  if (const Command* command = find_command(argc - 1, argv + 1)) return command;
  if (const std::string group = group_commands(args[0]); !group.empty()) {  // `joule data` alone
    exit_code = report_error(args[0], "'" + args[0] + "' needs one of its commands: " + group,
                             "run e.g. `joule " + group.substr(0, group.find(',')) + " --help`", 2);
    return nullptr;
  }
  const bool two = args.size() > 1 && args[1].rfind('-', 0) != 0;
  std::cerr << "joule: unknown command '" << args[0] << (two ? " " + args[1] : "") << "'\n\n" << usage();
  exit_code = 2;
  return nullptr;
}

int name_words(const Command& command) { return std::strchr(command.name, ' ') ? 2 : 1; }

}  // namespace joule::cli
