#!/usr/bin/env bash
# Builds the libFuzzer harnesses with clang (tests/fuzz/CMakeLists.txt, apart from the LibTorch build) and
# runs each for a bounded time from its seed corpus. Any crash, sanitizer report or broken invariant fails.
#   tests/fuzz/run.sh [--seconds N] [--build-dir DIR] [--build-only | --no-build] [HARNESS ...]
#   (defaults: 20 s each, build/fuzz, all five: safetensors run_config tokenizer shard run_deflate)
# --build-only configures and builds (ctest's fixture fuzz.build); --no-build only runs binaries that are
# already built (ctest's fuzz.<harness> tests, which run in parallel and so must never configure or build the
# shared directory). Each harness writes only its own files: DIR/corpus_NAME, DIR/fuzz_NAME.log, DIR/tmp_NAME,
# DIR/artifacts/NAME-*. A crash leaves its input in DIR/artifacts/; replay it with DIR/fuzz_NAME FILE.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
seconds=20 build=$here/../../build/fuzz build_only=0 no_build=0 harnesses=()
while (($#)); do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    --build-only) build_only=1; shift ;;
    --no-build) no_build=1; shift ;;
    -*) echo "fuzz: unknown option $1" >&2; exit 2 ;;
    *) harnesses+=("$1"); shift ;;
  esac
done
((${#harnesses[@]})) || harnesses=(safetensors run_config tokenizer shard run_deflate)
((build_only && no_build)) && { echo "fuzz: --build-only and --no-build exclude each other" >&2; exit 2; }
if ((!no_build)); then
  command -v clang++ >/dev/null || { echo "fuzz: clang++ not found (apt-get install clang libclang-rt-dev)" >&2; exit 1; }
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
  cmake -S "$here" -B "$build" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ "${launcher[@]}" > "$build.configure.log" 2>&1 ||
    { cat "$build.configure.log"; exit 1; }
  cmake --build "$build"
fi
((build_only)) && exit 0
for h in "${harnesses[@]}"; do
  [[ -x $build/fuzz_$h ]] || {
    echo "FAIL: $build/fuzz_$h is not built. It is built by the fixture test fuzz.build (ctest -R '^fuzz\.build\$'), or by" \
         "tests/fuzz/run.sh --build-only --build-dir $build"; exit 1; }
done
mkdir -p "$build/artifacts"
status=0
for h in "${harnesses[@]}"; do
  work=$build/corpus_$h scratch=$build/tmp_$h
  mkdir -p "$work"
  rm -rf "$scratch" && mkdir -p "$scratch"
  cp -n "$here/corpus/$h/"* "$work/" 2>/dev/null || true  # the seeds; what the fuzzer adds stays in the build tree
  echo "== fuzz_$h for ${seconds}s"
  if TMPDIR=$scratch ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
      "$build/fuzz_$h" -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$build/artifacts/${h}-" "$work" > "$build/fuzz_$h.log" 2>&1; then
    grep -E "^stat::number_of_executed_units|^stat::peak_rss_mb|^#[0-9]+.*DONE" "$build/fuzz_$h.log" | tr '\n' ' '
    echo
  else
    status=1
    tail -60 "$build/fuzz_$h.log"
    echo "FAIL: fuzz_$h found a crash; input in $build/artifacts/"
  fi
done
exit $status
