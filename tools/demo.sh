#!/usr/bin/env bash
# The main job on the embedded default: install, build, make the demo corpus and its shards
# (synthetic text -> WordPiece vocab -> NVIDIA-layout HDF5 shards with a held-out eval shard),
# pretrain a small BERT on 2 MPI ranks, and print the training-cost summary.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
bash tools/build.sh
joule=build/${JOULE_PRESET:-ci}/tools/joule
demo=demo
mkdir -p "$demo"
"$joule" version
"$joule" data synth --out "$demo/corpus.txt" --documents 3000 --seed 1
"$joule" data vocab --input "$demo/corpus.txt" --out "$demo/vocab.txt" --size 2000
"$joule" data create --input "$demo/corpus.txt" --vocab "$demo/vocab.txt" --out "$demo/shards" \
  --seq-len 128 --max-pred 20 --dupe-factor 5 --shards 4 --eval-documents 200
"$joule" data inspect "$demo/shards/train" --samples 1
rm -rf "$demo/run"
mpirun -np 2 --oversubscribe --bind-to none $( [[ $(id -u) -eq 0 ]] && echo --allow-run-as-root ) \
  "$joule" train --config configs/demo-tiny.toml
# The same run as one self-contained HTML page (SVG charts; open it in a browser).
"$joule" report "$demo/run"
