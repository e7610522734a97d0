#!/usr/bin/env bash
# Samples to a target accuracy over seeds, as MLPerf's reference convergence points count them: a recipe (a joule
# train config) trained with N seeds on 2 ranks, each run stopping at the first held-out eval at or above TARGET
# (eval.target_mlm_accuracy, every EVAL steps); one JSON line per run (seed, reached, step, sequences and training wall
# time to target, the accuracy then), the machine's description first. tools/bench/tables.py's `convergence_seeds`
# kind tabulates them (mean, std, min, max of sequences to target).
#   bash tools/bench/convergence_seeds.sh JOULE CONFIG OUT.jsonl [SEEDS] [TARGET] [EVAL] [FLAGS...]
# Run from the directory the config's paths are relative to (the repository root for configs/demo-tiny.toml, after
# tools/demo.sh made demo/shards). SEEDS: how many from 42 (default 5); TARGET default 0.65; EVAL default 50; FLAGS go
# to joule train.
set -euo pipefail
joule=$(realpath "$1") config=$(realpath "$2") out=$(realpath -m "$3") seeds=${4:-5} target=${5:-0.65} every=${6:-50}
shift $(($# < 6 ? $# : 6))
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 "$here/bench_env.py" --note "samples to held-out mlm_acc $target over seeds: $(basename "$config") on 2 ranks, \
eval every $every steps; extra flags: ${*:-none}" > "$out"
root=$( [[ $(id -u) -eq 0 ]] && echo --allow-run-as-root )
for seed in $(seq 42 $((41 + seeds))); do
  # shellcheck disable=SC2086
  mpirun -np 2 --oversubscribe --bind-to none $root "$joule" train --config "$config" --run-dir "$work/run" \
    --set "train.seed=$seed" --set "eval.target_mlm_accuracy=$target" --set "eval.every_steps=$every" \
    --set checkpoint.every_steps=0 "$@" > "$work/train.log" 2>&1 || { cat "$work/train.log"; exit 1; }
  python3 - "$work/run" "$seed" "$(basename "$config")" "$*" >> "$out" <<'PY'
import json, sys
run, seed, config, flags = sys.argv[1:]
s = json.load(open(f"{run}/summary.json"))
t = s["target_accuracy"]
print(json.dumps({"case": "convergence_seeds", "config": config, "flags": flags, "seed": int(seed),
                  "precision": s["workload"]["dtype"], "pack": s["workload"].get("pack", 0),
                  "global_batch": s["workload"]["global_batch"], "target": t["target"], "reached": t["reached"],
                  "step": t["step"], "sequences": t["sequences"], "wall_s": round(t["wall_s"], 2),
                  "mlm_accuracy": round(t["mlm_accuracy"], 4)}))
PY
  rm -rf "$work/run"
done
echo "wrote $out"
