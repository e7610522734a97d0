// Numeric command-line flags, each declared once with its range: cxxopts sees them as text (its own integer parser
// wraps 5000000000 into an int without a word), joule parses them with the one checked parser
// (launch/util/options.h: the whole text, no overflow) and holds them to their range. The range is in the flag's
// --help line and in its error ("--batch 0 is outside [1, 1048576]"), as the run config's keys have theirs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <cxxopts.hpp>

#include "launch/util/options.h"

namespace joule::tools {

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

}  // namespace joule::tools
