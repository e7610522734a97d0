// The joule commands as one table, git/cargo style: each entry's name, one-line summary, handler and the thread
// runtime its process needs. The table dispatches, prints the usage and is what tests iterate, so a command added to
// it is tried by every test that walks the commands. Each command group's flags and handler live in their own file
// beside this one (train.cc, run.cc, plan.cc, model.cc, infer.cc, serve.cc,
// bench.cc, bench_serve.cc, data.cc).
//
// Two executables share it. `joule`, the front (tools/joule_main.cc), loads no LibTorch: it answers the usage and runs
// the commands whose work needs none (reports, plans, the data commands) itself, in milliseconds; for the others it
// sets their thread environment and executes `joule-engine` beside it (tools/engine_main.cc, every command, LibTorch
// loaded once), whose handlers engine.h names. No LibTorch in this header or in command.cc.
#pragma once

#include <string>
#include <vector>

namespace joule::cli {

// What the process's OpenMP and OpenBLAS threads are set up for before LibTorch loads (launch/runtime.h).
enum class ThreadRuntime {
  none,      // no parallel work worth a second start of LibTorch (0.6 s on a Zen 3): the data commands, and those that
             // read and write a run's or a model's files (summary, report, export, plan, model info)
  training,  // idle threads sleep: other ranks and the communicator share the cores
  serving,   // inference alone on its cores: idle threads spin between short parallel regions
  service,   // serving that waits for requests (joule serve): the spinning stops after a few milliseconds idle
};

// A command's handler: argv[0] is the command's last word; returns the exit code.
using Handler = int (*)(int argc, char** argv);
// The handler of a command the engine runs (engine.h): the front executes joule-engine for it.
constexpr Handler kEngine = nullptr;
// How the front reads a kEngine command's line first, without LibTorch (engine_args.h): it throws what the engine's
// handler would throw at its doors (an unknown flag, a number out of range, a bad run config), and --help.
using Door = void (*)(int argc, char** argv);

struct Command {
  const char* name;     // "train", "data create": one word, or a group and a word
  const char* summary;  // the usage line ("\n" continues it on the next line)
  Handler run;          // the front's own handler, or kEngine
  Door door;            // a kEngine command's line read as the engine will read it; nullptr for the front's
  ThreadRuntime runtime;
};

// Every command, in the order the usage lists them.
const std::vector<Command>& commands();

// The usage text: what joule is, how to call it, and every command with its summary.
std::string usage();

// The command that the `words` words after `joule` name: a two-word command's group and word, else one word; nullptr
// when none matches. Allocates nothing and reads only constant data: the process's first code calls it
// (tools/joule_main.cc), before any library has initialized.
const Command* find_command(int words, char** word);

// The commands of a group ("data synth, data vocab, ..."), "" when `word` is no group.
std::string group_commands(const std::string& word);

// The front's handlers (each in its group's file), which need no LibTorch.
int summary(int argc, char** argv);
int report(int argc, char** argv);
int plan(int argc, char** argv);
int plan_inference(int argc, char** argv);
int bench_serve(int argc, char** argv);
int data_synth(int argc, char** argv);
int data_vocab(int argc, char** argv);
int data_create(int argc, char** argv);
int data_pack(int argc, char** argv);
int data_inspect(int argc, char** argv);
int data_tokenize(int argc, char** argv);
int data_order(int argc, char** argv);

}  // namespace joule::cli
