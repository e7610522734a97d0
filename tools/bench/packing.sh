#!/usr/bin/env bash
# Packed rows against padded ones: `joule train` on the same sequences, one a row (padded) and packed several a row
# (`joule data create --pack`), alternated run by run; every run's summary.json figures (seq/s after warm-up, MFU,
# the packing) as one raw JSON line, the machine's description first.
#   bash tools/bench/packing.sh JOULE OUT.jsonl [PAIRS]
# The corpora, made here:
#   demo, seq 128:  tools/demo.sh's (data synth 3000 documents seed 1, vocab 2000, dupe factor 5); packed up to 8 a
#                   row (its sequences are short: 3 a row leave 2 % of the row empty, 8 under 1 %).
#   wiki-like, 512: padded shards whose sequence lengths follow Wikipedia's at 512 (tools/bench/wikipedia_shards.py:
#                   Krell et al.'s published histogram, random tokens; Debian's python3-h5py), 20,000 sequences in two
#                   shards, packed up to 3 a row (NVIDIA's MLPerf setting) by `joule data pack`.
# Each case trains bert-base for STEPS steps (2 warm-up steps not timed) on one rank with every core, in bf16 and fp32.
# BENCHMARKS.md's packing table is made from OUT by tools/bench/tables.py.
set -euo pipefail
joule=$(realpath "$1") out=$(realpath -m "$2") pairs=${3:-2}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cd "$work"

"$joule" data synth --out corpus.txt --documents 3000 --seed 1 > /dev/null
"$joule" data vocab --input corpus.txt --out vocab.txt --size 2000 > /dev/null
create() {  # NAME INPUT SEQ PRED [FLAGS]
  local name=$1 input=$2 seq=$3 pred=$4
  shift 4
  "$joule" data create --input "$input" --vocab vocab.txt --out "$name" --seq-len "$seq" --max-pred "$pred" \
    --dupe-factor 5 --shards 4 "$@" > /dev/null
}
create demo_padded corpus.txt 128 20
create demo_packed corpus.txt 128 20 --pack --max-per-pack 8
/usr/bin/python3 "$here/wikipedia_shards.py" --out wiki_padded/train --sequences 20000 --shards 2 > /dev/null
"$joule" data pack wiki_padded/train wiki_packed --max-per-pack 3 > /dev/null

python3 "$here/bench_env.py" --note "packed against padded: joule train --config bert-base on one rank, every core, \
the same sequences padded (one a row) or packed (data create --pack; data pack for wiki), alternated run by run ($pairs pairs); seq/s \
after 2 warm-up steps from summary.json" > "$out"
# corpus seq micro-batch steps
CASES=("demo 128 32 8" "wiki 512 8 8")
for c in "${CASES[@]}"; do
  read -r corpus seq micro steps <<<"$c"
  for precision in bf16 fp32; do
    for pair in $(seq "$pairs"); do
      for layout in padded packed; do  # alternated run by run: drift in the machine touches both alike
        rm -rf run
        printf '[model]\nconfig = "bert-base"\n[train]\nmicro_batch = %s\nlog_every_steps = %s\n' "$micro" "$steps" \
          > run.toml
        "$joule" train --config run.toml --data "${corpus}_${layout}/train" --run-dir run --steps "$steps" \
          --precision "$precision" > train.log 2>&1 || { cat train.log; exit 1; }
        python3 - run/summary.json "$corpus" "$seq" "$layout" "$precision" "$pair" "$micro" >> "$out" <<'PY'
import json, sys
path, corpus, seq, layout, precision, pair, micro = sys.argv[1:]
s = json.load(open(path))
w = s["workload"]
print(json.dumps({"case": "packing", "corpus": corpus, "seq_len": int(seq), "layout": layout,
                  "precision": precision, "pair": int(pair), "micro_batch": int(micro), "steps": s["steps"],
                  "sequences": s["sequences"], "seq_per_s": s["seq_per_s"], "mfu": s.get("mfu"),
                  "pack": w.get("pack", 0), "packing_efficiency": w.get("packing_efficiency"),
                  "model": w["model"]}))
PY
      done
    done
  done
done
echo "wrote $out"
