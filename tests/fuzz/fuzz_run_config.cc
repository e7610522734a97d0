// The run-config parser on arbitrary text: it must either throw RunConfigError or give a config that
// validates and whose resolved TOML (to_toml) reads back to the same config. Each line is also tried
// as a --set assignment.
#include <cstdint>
#include <cstdlib>
#include <sstream>
#include <string>

#include "trainer/run_config.h"

using joule::RunConfigError;
using joule::trainer::RunConfig;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const RunConfig c = RunConfig::from_toml_text(text, "fuzz.toml");
    const std::string resolved = c.to_toml();
    if (RunConfig::from_toml_text(resolved, "resolved.toml").to_toml() != resolved) std::abort();
  } catch (const RunConfigError&) {
  }
  RunConfig c;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    try {
      c.set(line);
    } catch (const RunConfigError&) {
    }
  }
  try {
    c.validate();
  } catch (const RunConfigError&) {
  }
  return 0;
}
