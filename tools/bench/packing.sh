#!/usr/bin/env bash
# Packed rows against padded ones: `joule train` on the same sequences, one a row (padded) and packed several a row
# (`joule data create --pack`), alternated run by run; every run's summary.json figures (seq/s after warm-up, MFU,
# the packing) as one raw JSON line, the machine's description first.
#   bash tools/bench/packing.sh JOULE OUT.jsonl [PAIRS]
# The corpora, made here:
#   demo, seq 128:  tools/demo.sh's (data synth 3000 documents seed 1, vocab 2000, dupe factor 5); packed up to 8 a
#                   row (its sequences are short: 3 a row leave 9 % of the row empty).
#   wiki-like, 512: the same synthetic facts joined into articles whose lengths follow Wikipedia's heavy tail (a
#                   lognormal of median 6 documents, sigma 1.1, in words about 400 median), data create at seq 512,
#                   max predictions 80; about half of its padded tokens are padding, as Krell et al. measured on
#                   Wikipedia at 512. Packed up to 3 a row (NVIDIA's MLPerf setting).
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
python3 - corpus.txt wiki.txt <<'PY'
import random, sys
docs = open(sys.argv[1]).read().strip().split("\n\n")
rng = random.Random(7)
out, i = [], 0
while i < len(docs):
    n = max(1, min(60, round(rng.lognormvariate(1.8, 1.1))))  # documents per article: median 6, a heavy tail
    out.append("\n".join(docs[i:i + n]))
    i += n
open(sys.argv[2], "w").write("\n\n".join(out) + "\n")
PY
create() {  # NAME INPUT SEQ PRED [FLAGS]
  local name=$1 input=$2 seq=$3 pred=$4
  shift 4
  "$joule" data create --input "$input" --vocab vocab.txt --out "$name" --seq-len "$seq" --max-pred "$pred" \
    --dupe-factor 5 --shards 4 "$@" > /dev/null
}
create demo_padded corpus.txt 128 20
create demo_packed corpus.txt 128 20 --pack --max-per-pack 8
create wiki_padded wiki.txt 512 80
create wiki_packed wiki.txt 512 80 --pack --max-per-pack 3

python3 "$here/bench_env.py" --note "packed against padded: joule train --config bert-base on one rank, every core, \
the same sequences padded (one a row) or packed (data create --pack), alternated run by run ($pairs pairs); seq/s \
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
