#include "tools/config_dir.h"

#include <cstdlib>

#ifndef JOULE_SOURCE_CONFIG_DIR
#define JOULE_SOURCE_CONFIG_DIR "configs"
#endif

namespace joule::tools {

std::string config_dir() {
  if (const char* env = std::getenv("JOULE_CONFIG_DIR")) return env;
  return JOULE_SOURCE_CONFIG_DIR;
}

}  // namespace joule::tools
