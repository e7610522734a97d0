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

// Adds each flag to `options` as text, its help line followed by its range (and note).
void add_number_flags(cxxopts::Options& options, const std::vector<NumberFlag>& flags);

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

// Adds --help, parses, and refuses positional words the command did not declare. Throws HelpRequested for --help.
cxxopts::ParseResult parse(cxxopts::Options& options, int argc, char** argv);

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
