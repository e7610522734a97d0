#!/usr/bin/env bash
# joule against PyTorch's own DistributedDataParallel (gloo), same machine, same LibTorch build (Debian's 1.13),
# same architecture, parameter count, micro-batch, sequence length, dropout and LAMB, synthetic batches in memory.
# Alternates the two implementations run by run, at 2 ranks x 1 thread and 1 rank x 2 threads, in fp32 and in bf16
# mixed precision (joule --precision bf16; PyTorch under torch.autocast("cpu", dtype=torch.bfloat16)), and prints
# seq/s of each, the ratio, joule's fraction of the matmul roofline (in the same dtype) measured in the same run, the
# peak RSS, and joule's bf16 / fp32 speed-up.
#
#   bash tools/bench/compare_pytorch.sh [--models "bert-base bert-large"] [--layouts "2x1 1x2"] [--precisions "fp32 bf16"]
#                                       [--repeats 3] [--steps 4] [--micro-batch 8] [--shard none|zero1] [--min-ratio R]
#                                       [--out results.jsonl]
# PYTHONS="/usr/bin/python3 /path/to/python3" runs the PyTorch side on each of those interpreters' PyTorch in turn
# (default: Debian's /usr/bin/python3, PyTorch 1.13); the table has a column per PyTorch version. An entry written
# PATH+compile runs that interpreter's PyTorch 2.x through torch.compile (ddp_bert.py --compile) as one more column.
# The result file (JSON lines) starts with the machine's description (tools/bench/bench_env.py) and holds every run,
# numbered by repeat; `python3 tools/bench/tables.py summary FILE...` prints the table again from one or more of them,
# and BENCHMARKS.md's tables are made from the files committed under tools/bench/results/ (tools/bench/tables.py).
# The PyTorch side times both of its LAMB forms in each run (tools/bench/ddp_bert.py --lamb both).
# --shard zero1 runs both sides with a sharded optimizer: joule's optimizer.shard = zero1, and PyTorch's LAMB under
# torch.distributed.optim.ZeroRedundancyOptimizer (ddp_bert.py --shard zero1); the table's layout says so.
# Exits non-zero when a ratio falls below --min-ratio (default 0: report only). Needs python3-torch
# (bash tools/setup.sh --reference) and a built joule (bash tools/build.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
models="bert-base bert-large" layouts="2x1 1x2" precisions="fp32 bf16" repeats=3 steps=4 micro=8 shard=none min_ratio=0
out=""
while (($#)); do
  case $1 in
    --models) models=$2; shift 2 ;;
    --layouts) layouts=$2; shift 2 ;;
    --precisions) precisions=$2; shift 2 ;;
    --repeats) repeats=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --micro-batch) micro=$2; shift 2 ;;
    --shard) shard=$2; shift 2 ;;
    --min-ratio) min_ratio=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) echo "compare_pytorch.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
joule=${JOULE:-build/${JOULE_PRESET:-ci}/tools/joule}
[[ -x $joule ]] || { echo "no $joule: build first (bash tools/build.sh)" >&2; exit 1; }
read -r -a pythons <<< "${PYTHONS:-/usr/bin/python3}"
for python in "${pythons[@]}"; do
  "${python%+compile}" -c "import torch" 2>/dev/null || { echo "${python%+compile} has no torch: bash tools/setup.sh --reference (or set PYTHONS)" >&2; exit 1; }
done
out=${out:-$(mktemp /tmp/joule-compare-XXXXXX.jsonl)}
/usr/bin/python3 tools/bench/bench_env.py --note "compare_pytorch.sh --models '$models' --layouts '$layouts' --precisions '$precisions' --repeats $repeats --steps $steps --micro-batch $micro --shard $shard" > "$out"
# Each run's JSON line, numbered with its repeat.
keep() { grep '^{' | /usr/bin/python3 -c 'import json,sys; r=json.loads(sys.stdin.readline()); r["repeat"]=int(sys.argv[1]); print(json.dumps(r))' "$1" >> "$out"; }
root=(); [[ $(id -u) -eq 0 ]] && root=(--allow-run-as-root)
# The same process environment for both: passive OpenMP waits, OpenBLAS threads that sleep when idle.
export OMP_WAIT_POLICY=PASSIVE OPENBLAS_THREAD_TIMEOUT=4
port=29600
for model in $models; do
  for layout in $layouts; do
    [[ $layout =~ ^[0-9]+x[0-9]+$ ]] || { echo "compare_pytorch.sh: --layouts takes RANKSxTHREADS words, not '$layout'" >&2; exit 2; }
    ranks=${layout%x*} threads=${layout#*x}
    mpi=(mpirun -np "$ranks" --oversubscribe --bind-to none "${root[@]}" -x OMP_WAIT_POLICY -x OPENBLAS_THREAD_TIMEOUT
         -x OMP_NUM_THREADS="$threads" -x OPENBLAS_NUM_THREADS="$threads")
    for r in $(seq 1 "$repeats"); do
      for precision in $precisions; do
        # Alternate which goes first, so neither always runs on a warmer or cooler machine.
        order=(joule "${pythons[@]}"); (( r % 2 == 0 )) && order=("${pythons[@]}" joule)
        for impl in "${order[@]}"; do
          if [[ $impl == joule ]]; then
            "${mpi[@]}" "$joule" bench train --config "$model" --micro-batch "$micro" --threads "$threads" --steps "$steps" --warmup 2 \
              --precision "$precision" --shard "$shard" | keep "$r"
          else
            port=$((port + 1))
            compile=(); [[ $impl == *+compile ]] && compile=(--compile)
            "${mpi[@]}" "${impl%+compile}" tools/bench/ddp_bert.py --config "configs/models/$model.json" --micro-batch "$micro" \
              --threads "$threads" --steps "$steps" --warmup 2 --port "$port" --precision "$precision" --shard "$shard" "${compile[@]}" | keep "$r"
          fi
          echo "$model $layout $precision run $r $impl: $(tail -1 "$out" | /usr/bin/python3 -c 'import json,sys; print(round(json.load(sys.stdin)["seq_per_s"], 3), "seq/s")')" >&2
        done
      done
    done
  done
done
/usr/bin/python3 tools/bench/tables.py summary --min-ratio "$min_ratio" "$out"
