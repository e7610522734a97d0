#!/usr/bin/env bash
# The rate a classifier is served at within a p99 bound (BENCHMARKS.md, "Serving"), in rounds, each one alternating:
#   closed  joule bench infer: batches back to back, the best throughput whose p99 meets the bound;
#   ideal   serve_ideal.py on that closed loop: the rate queueing alone allows with its forward times (no overhead);
#   joule   joule bench serve against the joule serve it starts (the highest offered rate served within the bound);
#   anchor  the same load against tools/bench/serve_anchor.py: FastAPI + PyTorch 2.x eager bf16, the same batching.
# Appends the machine's description, then one JSON line per measurement ("round", "server" added) to OUT.
#
#   bash tools/bench/serve_compare.sh build/ci/tools/joule MODEL_DIR OUT.jsonl [ROUNDS]
#
# Environment: MAX_BATCH (8) and DELAY_MS (0), both servers' batching; P99_MS (100); SEQ_LEN (128); SECONDS_PER_RATE (10) per
# offered rate; START_RATE (4); ANCHOR_PYTHON (pyenv's python3 with torch 2.x, transformers, fastapi, uvicorn);
# ANCHOR_PORT (8765). Outside CI: it takes minutes and PyPI packages.
set -euo pipefail
joule=$(realpath "$1") model=$(realpath "$2") out=$3 rounds=${4:-3}
here=$(cd "$(dirname "$0")" && pwd)
max_batch=${MAX_BATCH:-8} delay=${DELAY_MS:-0} p99=${P99_MS:-100} seq=${SEQ_LEN:-128} seconds=${SECONDS_PER_RATE:-10}
start=${START_RATE:-4} python=${ANCHOR_PYTHON:-$HOME/.pyenv/versions/3.11.7/bin/python} port=${ANCHOR_PORT:-8765}
tag() {  # ROUND SERVER: the JSON line on stdin with both added
  python3 -c 'import json, sys; r = json.loads(sys.stdin.read()); r["round"] = int(sys.argv[1]); r["server"] = sys.argv[2]
r["batching"] = {"max_batch": int(sys.argv[3]), "max_queue_delay_ms": float(sys.argv[4])}; print(json.dumps(r))' "$@" \
    "$max_batch" "$delay"
}
python3 "$here/bench_env.py" --note "serve_compare.sh: bert classifier at $seq tokens, p99 bound $p99 ms, batching \
$max_batch / $delay ms" >> "$out"
anchor=
trap '[[ -n $anchor ]] && kill "$anchor" 2> /dev/null || true' EXIT
for round in $(seq 1 "$rounds"); do
  echo "== round $round: closed loop" >&2
  closed=$("$joule" bench infer --model "$model" --batches 1,2,4,8 --seq-len "$seq" --p99-ms "$p99" --seconds 5 --json)
  tag "$round" "closed loop (joule bench infer)" <<< "$closed" >> "$out"
  python3 "$here/serve_ideal.py" --max-batch "$max_batch" --max-queue-delay-ms "$delay" <<< "$closed" |
    tag "$round" "ideal queue (the closed loop's forward times)" >> "$out"
  echo "== round $round: joule serve" >&2
  "$joule" bench serve --model "$model" --seq-len "$seq" --p99-ms "$p99" --seconds "$seconds" --start-rate "$start" \
    --json -- --max-batch "$max_batch" --max-queue-delay-ms "$delay" | tag "$round" "joule serve" >> "$out"
  echo "== round $round: FastAPI + PyTorch" >&2
  "$python" "$here/serve_anchor.py" --model "$model" --port "$port" --max-batch "$max_batch" \
    --max-queue-delay-ms "$delay" > anchor.log 2>&1 &
  anchor=$!
  for _ in $(seq 1 600); do grep -q "^serving" anchor.log && break; sleep 0.2; done
  sleep 2  # uvicorn binds after the line
  version=$("$python" -c 'import torch; print(torch.__version__)' 2> /dev/null)
  "$joule" bench serve --model "$model" --url "http://127.0.0.1:$port" --seq-len "$seq" --p99-ms "$p99" \
    --seconds "$seconds" --start-rate "$start" --json | tag "$round" "FastAPI + PyTorch $version eager" >> "$out"
  kill "$anchor"
  wait "$anchor" 2> /dev/null || true
  anchor=
done
