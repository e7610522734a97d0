#!/usr/bin/env bash
# The main job on the embedded default. Until `joule train` lands this installs, builds and runs the
# model benchmark on bert-base (forward+backward seq/s against this CPU's sgemm rate).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bash tools/build.sh
build=build/${JOULE_PRESET:-ci}
"$build/tools/joule" version
"$build/tools/joule" model info --config bert-base
"$build/tools/joule" bench model --config bert-base --seq-len 128 --batch 8
