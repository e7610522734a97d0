#!/usr/bin/env bash
# Builds the libFuzzer harnesses with clang (tests/fuzz/CMakeLists.txt, apart from the LibTorch build) and
# runs each for a bounded time from its seed corpus. Any crash, sanitizer report or broken invariant fails.
#   tests/fuzz/run.sh [--seconds N] [--build-dir DIR] [--build-only] [HARNESS ...]
#   (defaults: 20 s each, build/fuzz, all four: safetensors run_config tokenizer shard)
# A crash leaves its input in DIR/artifacts/; replay it with DIR/fuzz_NAME FILE.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
seconds=20 build=$here/../../build/fuzz build_only=0 harnesses=()
while (($#)); do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    --build-only) build_only=1; shift ;;
    -*) echo "fuzz: unknown option $1" >&2; exit 2 ;;
    *) harnesses+=("$1"); shift ;;
  esac
done
((${#harnesses[@]})) || harnesses=(safetensors run_config tokenizer shard)
command -v clang++ >/dev/null || { echo "fuzz: clang++ not found (apt-get install clang libclang-rt-dev)" >&2; exit 1; }
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_C_COMPILER_LAUNCHER=ccache)
cmake -S "$here" -B "$build" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ "${launcher[@]}" > "$build.configure.log" 2>&1 ||
  { cat "$build.configure.log"; exit 1; }
cmake --build "$build"
((build_only)) && exit 0
mkdir -p "$build/artifacts"
status=0
for h in "${harnesses[@]}"; do
  work=$build/corpus_$h
  mkdir -p "$work"
  cp -n "$here/corpus/$h/"* "$work/" 2>/dev/null || true  # the seeds; what the fuzzer adds stays in the build tree
  echo "== fuzz_$h for ${seconds}s"
  if ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
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
