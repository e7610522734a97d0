#!/usr/bin/env bash
# optimizer.shard = zero1 against none: `joule bench train --shard zero1` and `--shard none` alternated run by run
# (this script's loop pairs them; each run's figures are joule's own, in its JSON line), per model and rank count; every run's JSON line (step time, peak RSS of the largest rank,
# optimizer state per rank, bytes communicated) into one raw file, the machine's description first. Rows whose
# `none` run cannot fit this machine's memory are run with zero1 alone (CASES below says which).
#   bash tools/bench/zero1.sh JOULE OUT.jsonl [PAIRS]
# BENCHMARKS.md's zero1 table is made from OUT by tools/bench/tables.py.
set -euo pipefail
joule=$(realpath "$1") out=$2 pairs=${3:-3}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# model ranks micro-batch modes [precision]; ZERO1_CASES (one case per line) replaces them
CASES=("bert-base 2 8 both" "bert-base 4 8 both" "bert-large 2 4 both" "bert-large 4 4 zero1")
if [[ -n ${ZERO1_CASES:-} ]]; then mapfile -t CASES <<<"$ZERO1_CASES"; fi
python3 "$here/bench_env.py" --note "zero1 against none: mpirun -np R joule bench train --config MODEL --micro-batch B \
--threads 1 --steps 3 --warmup 1 --shard zero1|none, alternated run by run ($pairs pairs); precision auto unless a \
case sets it" > "$out"
for c in "${CASES[@]}"; do
  read -r model ranks micro modes precision <<<"$c"
  bench() {
    echo "exec mpirun -np $ranks --oversubscribe --allow-run-as-root --bind-to none -x OMP_NUM_THREADS=1 $joule bench \
train --config $model --micro-batch $micro --threads 1 --steps 3 --warmup 1 --precision ${precision:-auto} --shard $1 \
>> $work/$1.jsonl 2>> $work/$1.log"
  }
  : > "$work/zero1.jsonl"
  : > "$work/none.jsonl"
  for _ in $(seq "$pairs"); do  # alternated run by run, so drift in the machine touches both modes alike
    sh -c "$(bench zero1)"
    if [[ $modes == both ]]; then sh -c "$(bench none)"; fi
  done
  python3 - "$work" "$out" <<'PY'
import json, sys
work, out = sys.argv[1:]
with open(out, "a") as f:
    for mode in ("zero1", "none"):
        rows = [json.loads(l) for l in open(f"{work}/{mode}.jsonl") if l.startswith("{")]  # rank 0's JSON line
        for repeat, row in enumerate(rows, 1):
            row["repeat"] = repeat
            f.write(json.dumps(row) + "\n")
PY
done
echo "wrote $out"
