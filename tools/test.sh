#!/usr/bin/env bash
# The test command: install dependencies, build, run every test under ctest (unit, 2- and 4-rank MPI,
# end to end, Slurm, fault injection, bad inputs, fuzzing), then the sanitizer builds: the unit and MPI
# tests under AddressSanitizer + UndefinedBehaviorSanitizer, the threaded parts under ThreadSanitizer.
#   JOULE_SANITIZERS=0 bash tools/test.sh     skips the two sanitizer builds (a quicker local run)
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bash tools/check/format.sh
bash tools/build.sh
ctest --preset "${JOULE_PRESET:-ci}" -j "$(nproc)"
if [[ "${JOULE_SANITIZERS:-1}" != 0 ]]; then
  for preset in asan tsan; do
    JOULE_PRESET=$preset bash tools/build.sh
    ctest --preset $preset -j "$(nproc)"
  done
fi
