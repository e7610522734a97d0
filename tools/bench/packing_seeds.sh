#!/usr/bin/env bash
# Does packing change what the demo learns? tools/demo.sh's recipe (configs/demo-tiny.toml, 2 ranks, the demo's
# corpus) trained on packed rows (13 a micro-batch, about 31 sequences, as the demo does) and on the same sequences
# padded (32 a micro-batch), one seed after another, packed and padded alternated; the held-out eval (the same 376
# sequences on both sides) every EVAL steps. One JSON line per run: the seed, the layout, the training wall time and
# every eval's (sequences trained, masked-LM accuracy, loss); the machine's description first.
# tools/bench/tables.py makes BENCHMARKS.md's table from it.
#   bash tools/bench/packing_seeds.sh JOULE OUT.jsonl [SEEDS] [EVAL] [FLAGS...]
# SEEDS: how many, from 42 (default 8); EVAL: steps between evals (default 100); FLAGS go to both runs' joule train
# (e.g. --set train.target_sequences=76800).
set -euo pipefail
joule=$(realpath "$1") out=$(realpath -m "$2") seeds=${3:-8} every=${4:-100}
shift $(($# < 4 ? $# : 4))
here=$(cd "$(dirname "$0")" && pwd)
config=$(realpath "$here/../../configs/demo-tiny.toml")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"
"$joule" data synth --out corpus.txt --documents 3000 --seed 1 > /dev/null
"$joule" data vocab --input corpus.txt --out vocab.txt --size 2000 > /dev/null
for layout in packed padded; do
  pack=()
  [[ $layout == packed ]] && pack=(--pack --max-per-pack 8)
  "$joule" data create --input corpus.txt --vocab vocab.txt --out "$layout" --seq-len 128 --max-pred 20 \
    --dupe-factor 5 --shards 4 --eval-documents 200 "${pack[@]}" > /dev/null
done
python3 "$here/bench_env.py" --note "packed against padded rows over seeds: configs/demo-tiny.toml on 2 ranks \
(packed 13 rows a micro-batch, padded 32), held-out eval every $every steps; extra flags: ${*:-none}" > "$out"
root=$( [[ $(id -u) -eq 0 ]] && echo --allow-run-as-root )
for seed in $(seq 42 $((41 + seeds))); do
  for layout in packed padded; do
    micro=13
    [[ $layout == padded ]] && micro=32
    rm -rf run
    # shellcheck disable=SC2086
    mpirun -np 2 --oversubscribe --bind-to none $root "$joule" train --config "$config" --run-dir run \
      --data "$layout/train" --eval-data "$layout/eval" --set "train.seed=$seed" --set "train.micro_batch=$micro" \
      --set "eval.every_steps=$every" --set checkpoint.every_steps=0 "$@" > train.log 2>&1 ||
      { cat train.log; exit 1; }
    python3 - run "$seed" "$layout" "$micro" >> "$out" <<'PY'
import json, sys
run, seed, layout, micro = sys.argv[1:]
s = json.load(open(f"{run}/summary.json"))
evals = [json.loads(l) for l in open(f"{run}/metrics.jsonl") if '"eval"' in l]
print(json.dumps({"case": "packing_seeds", "seed": int(seed), "layout": layout, "micro_batch": int(micro),
                  "steps": s["steps"], "sequences": s["sequences"], "wall_s": round(s["wall_s"], 2),
                  "precision": s["workload"]["dtype"],
                  "evals": [{"step": e["step"], "sequences": e["sequences"],
                             "mlm_accuracy": round(e["eval"]["mlm_accuracy"], 4),
                             "loss": round(e["eval"]["loss"], 4)} for e in evals]}))
PY
  done
done
echo "wrote $out"
