#!/usr/bin/env bash
# Configures and builds joule with a CMake preset (default: ci), through ccache: every target, or the ones named
#   bash tools/build.sh          everything (the tests too)
#   bash tools/build.sh joule    the joule binary alone (what tools/demo.sh runs)
set -euo pipefail
cd "$(dirname "$0")/.."
preset=${JOULE_PRESET:-ci}
# ccache: share hits between clones in different folders, and cache files compiled with the PCH.
export CCACHE_BASEDIR="$PWD"
export CCACHE_SLOPPINESS=pch_defines,time_macros,include_file_mtime,include_file_ctime
export CCACHE_MAXSIZE=${CCACHE_MAXSIZE:-5G}
cmake --preset "$preset" >/dev/null
cmake --build --preset "$preset" -j "$(nproc)" ${1:+--target "$@"}
