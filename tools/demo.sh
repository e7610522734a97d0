#!/usr/bin/env bash
# The main job on the embedded default: install, build, make the demo corpus and its shards
# (synthetic text -> WordPiece vocab -> NVIDIA-layout HDF5 shards with a held-out eval shard, the sequences packed up to
# 8 a row: 99 % of the rows' tokens are real, 41 % padded),
# pretrain a small BERT on 2 MPI ranks, print the training-cost summary, and answer the question joule is for (BERT-Large,
# 450M sequences, 16 x trn1 or p4d) with `joule plan`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh        # what building and running joule needs (the tests' extras: tools/test.sh)
# The joule binary alone. Without ccache: on a first build every file misses, and caching them (the 570 MB precompiled
# LibTorch header too) costs ~25 s; a rebuild in the same folder is ninja's incremental one either way.
CCACHE_DISABLE=1 bash tools/build.sh joule
joule=build/${JOULE_PRESET:-ci}/tools/joule
demo=demo
mkdir -p "$demo"
"$joule" version
"$joule" data synth --out "$demo/corpus.txt" --documents 3000 --seed 1
"$joule" data vocab --input "$demo/corpus.txt" --out "$demo/vocab.txt" --size 2000
"$joule" data create --input "$demo/corpus.txt" --vocab "$demo/vocab.txt" --out "$demo/shards" \
  --seq-len 128 --max-pred 20 --dupe-factor 5 --shards 4 --eval-documents 200 --pack --max-per-pack 8 \
  --replace  # the corpus was just rewritten
"$joule" data inspect "$demo/shards/train" --samples 1
rm -rf "$demo/run"
mpirun -np 2 --oversubscribe --bind-to none $( [[ $(id -u) -eq 0 ]] && echo --allow-run-as-root ) \
  "$joule" train --config configs/demo-tiny.toml
# The same run as one self-contained HTML page (SVG charts; open it in a browser).
"$joule" report "$demo/run"
# The demo trains bert-tiny on this host; the question joule is for is BERT-Large on a cluster. joule plan answers it from
# the cluster performance model (calibrated on published single-node figures; VALIDATION.md): the study's published
# figures beside the model's (trn1 bf16 against p4d TF32, with the error of each), then p4d in bf16.
echo
echo "The question joule is for: BERT-Large, 450M sequences of 128 tokens, on 16 x trn1.32xlarge or 16 x p4d.24xlarge (predicted; the full table: joule plan):"
"$joule" plan --study
