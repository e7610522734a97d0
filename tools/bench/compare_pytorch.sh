#!/usr/bin/env bash
# joule against PyTorch's own DistributedDataParallel (gloo), same machine, same LibTorch build (Debian's 1.13),
# same architecture, parameter count, micro-batch, sequence length, dropout and LAMB, synthetic batches in memory.
# Alternates the two implementations run by run, at 2 ranks x 1 thread and 1 rank x 2 threads, and prints seq/s
# of each, the ratio, joule's fraction of the sgemm roofline measured in the same run and the peak RSS.
#
#   bash tools/bench/compare_pytorch.sh [--models "bert-base bert-large"] [--repeats 3] [--steps 4]
#                                       [--micro-batch 8] [--min-ratio R] [--out results.jsonl]
# Exits non-zero when a ratio falls below --min-ratio (default 0: report only). Needs python3-torch
# (bash tools/setup.sh --reference) and a built joule (bash tools/build.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
models="bert-base bert-large" repeats=3 steps=4 micro=8 min_ratio=0 out=""
while (($#)); do
  case $1 in
    --models) models=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --micro-batch) micro=$2; shift 2 ;;
    --min-ratio) min_ratio=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "compare_pytorch.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
joule=${JOULE:-build/${JOULE_PRESET:-ci}/tools/joule}
[[ -x $joule ]] || { echo "no $joule: build first (bash tools/build.sh)" >&2; exit 1; }
/usr/bin/python3 -c "import torch" 2>/dev/null || { echo "python3-torch missing: bash tools/setup.sh --reference" >&2; exit 1; }
out=${out:-$(mktemp /tmp/joule-compare-XXXXXX.jsonl)}
: > "$out"
root=(); [[ $(id -u) -eq 0 ]] && root=(--allow-run-as-root)
# The same process environment for both: passive OpenMP waits, OpenBLAS threads that sleep when idle.
export OMP_WAIT_POLICY=PASSIVE OPENBLAS_THREAD_TIMEOUT=4
port=29600
for model in $models; do
  for layout in 2x1 1x2; do
    ranks=${layout%x*} threads=${layout#*x}
    mpi=(mpirun -np "$ranks" --oversubscribe --bind-to none "${root[@]}" -x OMP_WAIT_POLICY -x OPENBLAS_THREAD_TIMEOUT
         -x OMP_NUM_THREADS="$threads" -x OPENBLAS_NUM_THREADS="$threads")
    for r in $(seq 1 "$repeats"); do
      # Alternate which goes first, so neither always runs on a warmer or cooler machine.
      order=(joule pytorch); (( r % 2 == 0 )) && order=(pytorch joule)
      for impl in "${order[@]}"; do
        if [[ $impl == joule ]]; then
          "${mpi[@]}" "$joule" bench train --config "$model" --micro-batch "$micro" --threads "$threads" --steps "$steps" --warmup 2 \
            | grep '^{' >> "$out"
        else
          port=$((port + 1))
          "${mpi[@]}" /usr/bin/python3 tools/bench/ddp_bert.py --config "configs/models/$model.json" --micro-batch "$micro" \
            --threads "$threads" --steps "$steps" --warmup 2 --port "$port" | grep '^{' >> "$out"
        fi
        echo "$model $layout run $r $impl: $(tail -1 "$out" | /usr/bin/python3 -c 'import json,sys; print(round(json.load(sys.stdin)["seq_per_s"], 3), "seq/s")')" >&2
      done
    done
  done
done
/usr/bin/python3 - "$out" "$min_ratio" <<'PY'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
min_ratio = float(sys.argv[2])
groups = {}
for r in rows:
    groups.setdefault((r["model"], f'{r["ranks"]}x{r["threads"]}'), {}).setdefault(r["impl"], []).append(r)
print(f'{"model":<11} {"ranks x threads":<16} {"joule seq/s":>12} {"PyTorch seq/s":>14} {"ratio":>7} {"roofline":>9} {"joule RSS GiB":>14} {"PyTorch RSS GiB":>16} {"RSS/expected":>13}')
worst = None
for (model, layout), g in sorted(groups.items()):
    j, p = g.get("joule", []), g.get("pytorch-ddp-gloo", [])
    js, ps = statistics.median(x["seq_per_s"] for x in j), statistics.median(x["seq_per_s"] for x in p)
    ratio = js / ps
    worst = ratio if worst is None else min(worst, ratio)
    roof = statistics.median(x["roofline_fraction"] for x in j)
    print(f'{model:<11} {layout:<16} {js:>12.3f} {ps:>14.3f} {ratio:>7.2f} {roof:>9.2f} {max(x["peak_rss_bytes"] for x in j) / 2**30:>14.2f} '
          f'{max(x["peak_rss_bytes"] for x in p) / 2**30:>16.2f} {statistics.median(x["rss_over_expected"] for x in j):>13.2f}')
print(f"medians of {len(rows) // max(1, 2 * len(groups))} runs each; results in {sys.argv[1]}")
if min_ratio > 0 and worst < min_ratio:
    print(f"FAIL: the lowest ratio {worst:.2f} is below --min-ratio {min_ratio}")
    sys.exit(1)
PY
