#!/usr/bin/env bash
# The test command: install dependencies, check formatting, build, run every test under ctest (unit, 2- and 4-rank
# MPI, end to end, Slurm, fault injection, bad and hostile inputs, fuzzing), then the sanitizer builds: the unit and
# MPI tests under AddressSanitizer + UndefinedBehaviorSanitizer, the threaded parts under ThreadSanitizer. Ends with
# each stage's time (also when a stage fails).
#   JOULE_SANITIZERS=0 bash tools/test.sh     skips the two sanitizer builds (a quicker local run)
set -euo pipefail
cd "$(dirname "$0")/.."
stage_times=()
print_stage_times() {
  local status=$?
  ((${#stage_times[@]})) || return $status
  echo "tools/test.sh stages:"
  printf '  %s\n' "${stage_times[@]}"
  return $status
}
trap print_stage_times EXIT
# Runs STAGE's command and records how long it took (and whether it failed, before set -e ends the script).
stage() {
  local name=$1 start=$SECONDS status=0
  shift
  "$@" || status=$?
  stage_times+=("$(printf '%-14s %5d s%s' "$name" $((SECONDS - start)) "$( ((status)) && echo "  FAILED (exit $status)")")")
  return $status
}
stage setup bash tools/setup.sh --tests
stage format bash tools/check/format.sh
stage "build ci" bash tools/build.sh
stage "test ci" ctest --preset "${JOULE_PRESET:-ci}" -j "$(nproc)"
if [[ "${JOULE_SANITIZERS:-1}" != 0 ]]; then
  for preset in asan tsan; do
    stage "build $preset" env JOULE_PRESET=$preset bash tools/build.sh
    stage "test $preset" ctest --preset $preset -j "$(nproc)"
  done
fi
total=0
for t in "${stage_times[@]}"; do total=$((total + $(awk '{print $(NF-1)}' <<<"${t%%  FAILED*}"))); done
stage_times+=("$(printf '%-14s %5d s (%d min)' total $total $((total / 60)))")
