#!/usr/bin/env bash
# The loader alone: `joule bench data` (sequences/s the prefetching loader hands one rank under the global shuffle) on
# three data sets made here: the demo's shards (`joule data create`, 64-row chunks), 256 copies of them (the same
# reads over many files: resident memory must not grow with the shard count), and, given NVIDIA's
# create_pretraining_data.py, one shard its h5py writes (chunks h5py chooses: 10,485 rows x 2 columns of input_ids for
# 671k sequences). Each case runs RUNS times (default 5) as one rank alone and as one rank's part of a multi-rank step;
# BEFORE=JOULE2 also runs a second joule binary (e.g. a build before a loader change) on the one-rank cases, the two
# alternated run by run by this script's own loop (each run's figure is joule's own timing, in its JSON line). One JSON
# line per run, the machine's description first.
#   bash tools/bench/loader.sh JOULE OUT.jsonl [NVIDIA_SCRIPT] [RUNS]
# NVIDIA_SCRIPT runs from its own directory (it needs h5py, numpy, tqdm and six); it is run, never copied here.
# BENCHMARKS.md's loader table is made from OUT by tools/bench/tables.py.
set -euo pipefail
joule=$(realpath "$1") out=$2 nvidia=${3:+$(realpath "$3")} runs=${4:-5}
before=${BEFORE:+$(realpath "$BEFORE")}
here=$(cd "$(dirname "$0")" && pwd)
work=${WORK:-$(mktemp -d)}
mkdir -p "$work"
echo "work directory: $work" >&2

if [[ ! -d $work/demo/train ]]; then
  "$joule" data synth --out "$work/corpus.txt" --documents 3000 --seed 1 > /dev/null
  "$joule" data vocab --input "$work/corpus.txt" --out "$work/vocab.txt" --size 2000 > /dev/null
  "$joule" data create --input "$work/corpus.txt" --vocab "$work/vocab.txt" --out "$work/demo" --seq-len 128 \
    --max-pred 20 --dupe-factor 5 --shards 4 --eval-documents 200 > /dev/null  # the demo's shards (tools/demo.sh)
fi
if [[ ! -d $work/many ]]; then
  mkdir -p "$work/many"
  shards=("$work"/demo/train/*.hdf5)
  for i in $(seq 0 255); do cp "${shards[$((i % ${#shards[@]}))]}" "$work/many/part_$i.hdf5"; done
fi
sets=("demo $work/demo/train" "256-shards $work/many")
if [[ -n $nvidia ]]; then
  if [[ ! -f $work/nvidia/part_0.hdf5 ]]; then
    mkdir -p "$work/nvidia"
    "$joule" data synth --out "$work/nvidia_text.txt" --documents 70000 --seed 1 > /dev/null
    head -n 100000 "$work/nvidia_text.txt" > "$work/nvidia_vocab_sample.txt"
    "$joule" data vocab --input "$work/nvidia_vocab_sample.txt" --out "$work/nvidia_vocab.txt" --size 30522 > /dev/null
    (cd "$(dirname "$nvidia")" && USE_TORCH=0 python3 "$nvidia" --input_file "$work/nvidia_text.txt" \
      --output_file "$work/nvidia/part_0.hdf5" --vocab_file "$work/nvidia_vocab.txt" --do_lower_case \
      --max_seq_length 128 --max_predictions_per_seq 20 --masked_lm_prob 0.15 --random_seed 12345 --dupe_factor 5 \
      > "$work/nvidia.log" 2>&1)
  fi
  sets+=("nvidia $work/nvidia")
fi
for s in "${sets[@]}"; do "$joule" bench data --data "${s#* }" --batches 1 --warmup 0 > /dev/null; done  # index once

python3 "$here/bench_env.py" --note "loader.sh: joule bench data --json per data set, one rank alone (micro-batch 32) \
and rank 7 of 16 (global batch 8192, micro-batch 64; 128 ranks and 65,536 on the NVIDIA shard), $runs runs each" > "$out"

# Appends the runs' JSON lines (from FILE) to OUT with the case's labels; an older joule's lines lack the one-rank
# case's batch figures, which DEFAULTS (JSON) fills in.
collect() {  # FILE BINARY_LABEL DATA_LABEL [DEFAULTS]
  python3 -c "
import json, sys
for line in open(sys.argv[1]):
    if line.startswith('{'):
        r = json.loads(line)
        for k, v in json.loads(sys.argv[4] if len(sys.argv) > 4 else '{}').items():
            r.setdefault(k, v)
        r.update({'record': 'loader', 'joule': sys.argv[2], 'data': sys.argv[3]})
        print(json.dumps(r))" "$@" >> "$out"
}
for s in "${sets[@]}"; do
  name=${s%% *} dir=${s#* }
  alone="bench data --data $dir --micro-batch 32 --batches 2000 --json"
  if [[ $name == nvidia ]]; then
    part="bench data --data $dir --micro-batch 64 --global-batch 65536 --world-size 128 --rank 7 --batches 200 --json"
  else
    part="bench data --data $dir --micro-batch 64 --global-batch 8192 --world-size 16 --rank 7 --batches 1000 --json"
  fi
  : > "$work/new.jsonl"
  : > "$work/before.jsonl"
  if [[ -n $before ]]; then
    old_alone="bench data --data $dir --micro-batch 32 --batches $([[ $name == nvidia ]] && echo 20 || echo 500) --json"
    for _ in $(seq "$runs"); do  # alternated run by run, so drift in the machine touches both alike
      "$before" $old_alone >> "$work/before.jsonl"
      "$joule" $alone >> "$work/new.jsonl"
    done
    collect "$work/before.jsonl" before "$name" '{"micro_batch": 32, "global_batch": 32, "world_size": 1, "rank": 0}'
  else
    for _ in $(seq "$runs"); do "$joule" $alone >> "$work/new.jsonl"; done
  fi
  for _ in $(seq "$runs"); do "$joule" $part >> "$work/new.jsonl"; done
  collect "$work/new.jsonl" "$(git -C "$here" rev-parse --short HEAD)$(git -C "$here" diff --quiet HEAD -- :/data || echo +changes)" "$name"
done
