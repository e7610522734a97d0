#!/usr/bin/env bash
# The test command: install dependencies, build, run every test under ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bash tools/build.sh
ctest --preset "${JOULE_PRESET:-ci}" -j "$(nproc)"
