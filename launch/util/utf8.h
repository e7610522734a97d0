// UTF-8 validity of text joule parses. No LibTorch.
#pragma once

#include <string>

namespace joule {

// Where `text` first stops being valid UTF-8 ("line L, byte B (0xXX): not valid UTF-8"), or "". Every TOML
// file joule reads is checked before toml11 parses it: Debian's toml11 3.7.1 reads past its buffer on
// invalid UTF-8 inside a literal string (found by tests/fuzz/fuzz_run_config).
std::string utf8_problem(const std::string& text);

}  // namespace joule
