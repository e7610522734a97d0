// The command line's door: how every command declares and reads its flags. Numeric flags are declared once with their
// range: cxxopts sees them as text (its own integer parser wraps 5000000000 into an int without a word), joule parses
// them with the one checked parser (launch/util/options.h: the whole text, no overflow) and holds them to their range.
// The range is in the flag's --help line and in its error ("--batch 0 is outside [1, 1048576]"), as the run config's
// keys have theirs.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "launch/util/options.h"

namespace joule::cli {

// The ranges flags share. Bounds are what a run can mean, not what the hardware of the day holds: a batch of 2^20
// sequences, 4096 threads a process, 65536 nodes, a seed up to 10^18.
inline const OptionRange kSeeds{0, 1e18};
inline const OptionRange kThreads{0, 4096};
inline const OptionRange kNodes{1, 65536};
inline const OptionRange kBatch{1, 1 << 20};
inline const OptionRange kSeqLen{2, 65536};
inline const OptionRange kPredictions{0, 65536};
inline const OptionRange kRepeats{1, 1e9};
inline const OptionRange kWarmup{0, 1e9};

struct NumberFlag {
  const char* name;                    // "batch"
  const char* help;                    // "sequences per batch"
  const char* default_text = nullptr;  // nullptr: no default (the flag is optional; ask r.count first)
  OptionRange range;
  const char* note = "";  // what a special value means ("0: all")
};

// Adds each flag to `options` as text, its help line followed by its range (and note). parse() holds every one given
// (or defaulted) to its range before the command starts: a bad number is refused before any work.
void add_number_flags(cxxopts::Options& options, const std::vector<NumberFlag>& flags);

// Declares flags that `options` already has (as text) as number flags, for parse() to check: a command whose flags
// stand for ranged keys elsewhere (train's --steps is train.steps) holds them to those ranges at the same door.
void declare_number_flags(cxxopts::Options& options, const std::vector<NumberFlag>& flags);

// What a flag that names a path is to the command. parse() checks each one given before the command starts:
// - an input is a regular file or a directory as its kind says (never a FIFO or a device, which could block the
//   command for good, nor a symbolic link to nothing); one that is not there is left to the command, which says what
//   it expected (a preset name, a checkpoint) in its own terms;
// - an output file is free or a regular file (check_replaceable), is none of the command's inputs, lies in none of
//   its input directories and in no directory that a run, a model, a data set, a checkpoint or an inference run owns
//   (but for the file the command itself keeps there: `writes_in`);
// - an output directory is free or a directory, neither a symbolic link nor one of the inputs nor inside one. Whether
//   an existing one may be replaced is the command's to say (--replace).
enum class PathKind { input_file, input_dir, input_path, input_model, output_file, output_dir };

struct PathFlag {
  const char* name;            // "input"
  const char* help;            // "JSONL: ..."
  PathKind kind;               // input_path: a file or a directory; input_model: a preset name, or a path
  const char* holds = "";      // an input file's content, for --describe-flags: text, jsonl, json, toml, safetensors
  const char* writes_in = "";  // output_file: the one name it may have inside a directory joule owns ("report.html")
  const char* default_text = nullptr;
};

// Adds each flag to `options` as text (parse() checks it, above).
void add_path_flags(cxxopts::Options& options, const std::vector<PathFlag>& flags);

// The output directory flag `flag` (when given) of a command that makes `makes` ("a model directory (config.json)",
// owned_directory's words) and takes --replace: new or empty, or holding `makes` and --replace given. Another kind of
// directory, or one holding files of its own, is refused even with --replace: what is there would be lost or mixed.
void check_replacing(const cxxopts::ParseResult& r, const std::string& flag, const std::string& makes);

// --quiet: no progress line (launch/util/progress.h) on stderr for a command that reads or writes for long.
void add_quiet_flag(cxxopts::Options& options);

// The threads a --threads flag asks for, at most this process's cores: more only oversubscribes them (4096 threads
// made each batch take minutes). A capped request is said on stderr.
int thread_flag(const cxxopts::ParseResult& r, const NumberFlag& flag);

// Whether reading flags says its notes (thread_flag's cap) on stderr; on by default. The front turns them off when it
// reads an engine command's line only to refuse it: the engine reads it again and says them (engine_args.h).
void say_notes(bool on);

// What a directory holds that makes it joule's or a run's: "a run directory (summary.json)", "a model directory
// (config.json)", "a data set (metadata.json)", "a checkpoint (manifest.json)", "an inference run (inference.json)";
// "" for any other directory.
std::string owned_directory(const std::string& dir);

// The flag's value: an integer / a number within its range, else UsageError naming the flag, the text and the range.
int64_t int_flag(const cxxopts::ParseResult& r, const NumberFlag& flag);
double number_flag(const cxxopts::ParseResult& r, const NumberFlag& flag);

// The same checks for a number typed somewhere else (an item of a list flag): `what` names it in the error.
int64_t checked_int(const std::string& text, const std::string& what, const OptionRange& range, const char* note = "");
double checked_number(const std::string& text, const std::string& what, const OptionRange& range,
                      const char* note = "");

// `--help` was asked for: main prints the text and exits 0 (a library never exits).
struct HelpRequested {
  std::string text;
};

// Adds --help, parses, refuses positional words the command did not declare, and checks the declared number and path
// flags (above); `taken_inputs` are input paths the command took from argv itself (take_flag_values), which its
// outputs must not be either. Throws HelpRequested for --help, and for --describe-flags (a line per declared flag:
// "number NAME RANGE" or "path NAME KIND HOLDS": what tests/e2e/doors.py tries on every command).
cxxopts::ParseResult parse(cxxopts::Options& options, int argc, char** argv,
                           const std::vector<std::string>& taken_inputs = {});

// A flag that names a file or directory: present and not empty, else UsageError naming it.
std::string required(const cxxopts::ParseResult& r, const std::string& key);

// Takes every `--NAME VALUE` and `--NAME=VALUE` out of argv, in order, before cxxopts sees them: cxxopts splits a
// repeatable flag's value at commas, and a value may hold one (a path, a list of meters).
std::vector<std::string> take_flag_values(int& argc, char** argv, const std::string& name);

// Whether argv holds `--NAME` or `--NAME=...` (before parsing: a command that has two modes picks one).
bool has_flag(int argc, char** argv, const std::string& name);

// Refuses each of `flags` that argv holds: "--FLAG WHY". A mode's flags are refused in the other, never ignored.
void refuse_flags(int argc, char** argv, std::initializer_list<const char*> flags, const std::string& why);

// A flag whose value is one of `words` (an enum's, in its order): the enum value, else UsageError "--NAME is 'x';
// valid: a, b".
template <typename Enum>
Enum choice_flag(const cxxopts::ParseResult& r, const char* name, const std::vector<std::string>& words) {
  const std::string text = r[name].as<std::string>();
  if (const std::optional<Enum> e = parse_choice<Enum>(text, words)) return *e;
  throw UsageError("--" + std::string(name) + " is '" + text + "'; valid: " + word_list(words));
}

// "a,b,c" as its items, in order; "" is no item.
std::vector<std::string> split_commas(const std::string& text);

// An output directory as typed, made fit to have siblings (OUT.partial, OUT.old-PID) named after it: trailing slashes
// go ("shards/" is "shards"), and "." or ".." becomes the absolute path it stands for.
std::string output_directory(std::string out);

// "2GB", "512MB", "1.5G", "800M", "4096" (bytes): binary units, as free(1) and Slurm's --mem. At most 1 PiB.
int64_t parse_size(const std::string& flag, const std::string& text);

}  // namespace joule::cli
