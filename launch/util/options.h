// The options a component takes, as a table of fields: each component (the optimizer, the checkpoint policy, the
// accounting, ...) owns one section of the run config (`[optimizer]`, `[checkpoint]`, ...) as a plain struct with
// defaults, lists its keys here with their types and valid ranges, and checks its own cross-key rules. The run's
// config (trainer/run_config.h) only composes the sections: it parses TOML and `--set` through these tables, so a
// key's name, type and range are written once. No LibTorch, no TOML.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "launch/util/error.h"

namespace joule {

// A run config asks for something invalid: the key, its value and what is valid are in the message.
class RunConfigError : public Error {
 public:
  explicit RunConfigError(const std::string& message,
                          std::string hint =
                              "fix that key in the config file or the --set/flag that gives it (joule train "
                              "--help lists the flags)")
      : Error(message, std::move(hint), ErrorKind::usage) {}
};

// [lo, hi], open at either end where said.
struct OptionRange {
  double lo = -std::numeric_limits<double>::infinity(), hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;
  bool contains(double v) const;
  std::string text() const;  // "[1, inf)", "(0, 1)"
};

inline constexpr double kUnbounded = std::numeric_limits<double>::infinity();
inline OptionRange at_least(double lo) { return {lo, kUnbounded, false, false}; }
inline OptionRange above(double lo) { return {lo, kUnbounded, true, false}; }

// The position of `text` among `words`; empty when it is none of them.
std::optional<size_t> word_index(const std::string& text, const std::vector<std::string>& words);
// The words as a message lists them: "none, zero1".
std::string word_list(const std::vector<std::string>& words);

// A closed set of words held in an enum: TOML, --set and config.toml see the word, the code sees the enum, parsed once
// at the door. `words` are in the enum's order (value i is words[i]).
struct OptionChoice {
  std::vector<std::string> words;
  std::function<size_t()> get;
  std::function<void(size_t)> set;
  const std::string& word() const { return words.at(get()); }
  // Sets the field to `word`; false (the field unchanged) when it is none of the words.
  bool assign(const std::string& word) const;
};
template <typename Enum>
OptionChoice option_choice(Enum* field, std::vector<std::string> words) {
  return {std::move(words), [field] { return static_cast<size_t>(*field); },
          [field](size_t i) { *field = static_cast<Enum>(i); }};
}

// The enum value `text` names among `words` (in the enum's order); empty when none.
template <typename Enum>
std::optional<Enum> parse_choice(const std::string& text, const std::vector<std::string>& words) {
  if (const std::optional<size_t> i = word_index(text, words)) return static_cast<Enum>(*i);
  return std::nullopt;
}

using OptionTarget = std::variant<int64_t*, double*, std::string*, OptionChoice>;

struct OptionField {
  const char* name;  // the key inside its table ("micro_batch")
  OptionTarget target;
  std::optional<OptionRange> range = std::nullopt;  // numeric keys: the values allowed at the door
  const char* note = "";                            // what a special value means ("0: from train.target_sequences")
};

// The one parser of numbers typed by people (TOML aside: toml11 reads the file's own): the whole text or nothing, no
// overflow, no wrap-around. An integer is written in decimal ("-12") or as a whole number in scientific notation up to
// 2^53 ("450e6"). A number is a decimal or scientific literal, "inf" and "nan" included (every range refuses them,
// with a message that says so). Empty when the text is not one.
std::optional<int64_t> parse_integer_text(const std::string& text);

// A TOML parser's multi-line message ("[error] toml::parse_key: an invalid key appeared.\n --> FILE\n 1 | [train
// ...") as one line: "FILE: line N: an invalid key appeared".
std::string toml_syntax_problem(const std::string& message, const std::string& where);
std::optional<double> parse_number_text(const std::string& text);

// "an integer", "a number", "a string".
const char* option_type_name(const OptionTarget& target);
// The field's value as a number (integer and number fields).
double option_number(const OptionTarget& target);
// Shortest text that reads back to the same double.
std::string option_number_text(double v);

// Every ranged field of `table` within its range, else RunConfigError "run config: table.key = v is outside [..]
// (note)".
void check_option_ranges(const std::string& table, const std::vector<OptionField>& fields);
// check_option_ranges for a section struct (its kTable and fields()).
template <typename Section>
void check_section_ranges(const Section& section) {
  Section copy = section;  // fields() hands out pointers to its members
  check_option_ranges(Section::kTable, copy.fields());
}

}  // namespace joule
