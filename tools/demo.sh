#!/usr/bin/env bash
# The main job on the embedded default. Until `joule train` lands: install, build, make the demo
# corpus and its shards (synthetic text -> WordPiece vocab -> NVIDIA-layout HDF5 shards), inspect
# them, then benchmark bert-base forward+backward against this CPU's sgemm rate.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bash tools/build.sh
joule=build/${JOULE_PRESET:-ci}/tools/joule
demo=${JOULE_DEMO_DIR:-demo}
mkdir -p "$demo"
"$joule" version
"$joule" data synth --out "$demo/corpus.txt" --documents 3000 --seed 1
"$joule" data vocab --input "$demo/corpus.txt" --out "$demo/vocab.txt" --size 2000
"$joule" data create --input "$demo/corpus.txt" --vocab "$demo/vocab.txt" --out "$demo/shards" \
  --seq-len 128 --max-pred 20 --dupe-factor 5 --shards 4 --eval-documents 200
"$joule" data inspect "$demo/shards/train" --samples 1
"$joule" bench data --data "$demo/shards/train"
"$joule" model info --config bert-base
"$joule" bench model --config bert-base --seq-len 128 --batch 8
