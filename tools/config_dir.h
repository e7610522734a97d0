// Where joule's configs/ (model presets, instance profiles, grid intensities) are read from.
#pragma once

#include <string>

namespace joule::tools {

// The folder holding configs/ (presets): $JOULE_CONFIG_DIR, else the source tree's configs/.
std::string config_dir();

}  // namespace joule::tools
