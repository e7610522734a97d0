// What the two mains share (tools/joule_main.cc, the front; tools/engine_main.cc, the engine): finding the command
// on the command line, answering the usage, and running a handler with every kind of error turned into one message
// and an exit code. No LibTorch.
#pragma once

#include <string>

#include "tools/cli/command.h"

namespace joule::cli {

// The command the words after `joule` name, or nullptr after answering the command line itself: the usage (`joule`,
// `joule --help`), the table's names (`--list-commands`), an unknown command or a group alone; `exit_code` is then
// the process's exit code.
const Command* find_or_answer(int argc, char** argv, int& exit_code);

// How many words of the command line the command's name takes (1 or 2): its own arguments start after them.
int name_words(const Command& command);

// Runs `handler` on the command's own arguments (argv[0] its last word), mapping each kind of exception to one
// message and an exit code (usage 2, runtime 1).
int run_command(const Command& command, Handler handler, int argc, char** argv);

// Reads a kEngine command's line through its door (command.h) on a copy of argv, as run_command runs a handler: true
// when it passed; false when it was refused or answered (--help), with `exit_code` set. Notes are left to the engine.
bool passes_door(const Command& command, int argc, char** argv, int& exit_code);

// Prints an error and its "what to do" on every rank (one write per message, so lines from different ranks do not
// interleave), ends the whole job so that no rank is left waiting, and returns the exit code.
int report_error(const std::string& cmd, std::string what, std::string hint, int exit_code);

}  // namespace joule::cli
