#!/usr/bin/env bash
# Two-phase pretraining end to end at 2 ranks, the recipe README gives: phase 1 on short sequences (seq 64, padded),
# then phase 2 on long ones (seq 256, packed up to 3 a row by `joule data create --pack`) from phase 1's final/ with a
# fresh optimizer step count, preempted and resumed:
#  1. phase 2 starts from phase 1's weights (its first loss is phase 1's level, not a fresh model's), warms its learning
#     rate up from its own step 1, and trains the position embeddings phase 1 never reached (rows 64..255);
#  2. it counts sequences, not rows: summary.json's sequences are the packed rows' sequences, and the summary names
#     the packing and its efficiency;
#  3. preempted at step 5 and resumed, it ends bit-identical to an uninterrupted phase 2;
#  4. each phase's MLLOG and TensorBoard logs stay valid (a phase is a run of its own), read by the real checkers when
#     installed (mlperf-logging, tbparse; not in CI), else by the structural checks here.
# usage: phase2.sh JOULE MPIEXEC WORKDIR (JOULE: the fault-injection build, for the preemption)
set -euo pipefail
joule=$1 mpiexec=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../support/e2e_setup.sh"
e2e_workdir "$work"

e2e_make_data 400 5 600 --eval-documents 40
"$joule" data create --input corpus.txt --vocab vocab.txt --out phase2 --seq-len 256 --max-pred 40 --shards 2 \
  --eval-documents 40 --pack --max-per-pack 3 > create2.txt || fail "data create --pack"
grep -q "packed into" create2.txt || fail "data create --pack does not say what it packed: $(cat create2.txt)"

cat > phase1.toml <<'TOML'
[model]
config = "bert-tiny"
[data]
train = "shards/train"
eval = "shards/eval"
[train]
steps = 30
micro_batch = 8
seed = 7
log_every_steps = 10
[optimizer]
lr = 1e-2
warmup_fraction = 0.1
[eval]
every_steps = 30
batch = 32
[run]
dir = "p1"
TOML
cat > phase2.toml <<'TOML'
[model]
config = "p1/final"
[data]
train = "phase2/train"
eval = "phase2/eval"
[train]
steps = 10
micro_batch = 4
seed = 7
log_every_steps = 2
[optimizer]
lr = 4e-3
warmup_fraction = 0.2
[checkpoint]
every_steps = 3
keep = 4
[eval]
every_steps = 5
batch = 8
[run]
dir = "p2"
TOML

echo "== phase 1 (seq 64) and phase 2 (seq 256, packed) from its final/"
mpi "$joule" train --config phase1.toml > p1.txt 2>&1 || { cat p1.txt; fail "phase 1"; }
mpi "$joule" train --config phase2.toml --set run.dir=p2_whole > p2_whole.txt 2>&1 || { cat p2_whole.txt; fail "phase 2"; }
grep -q "packed rows holding" p2_whole.txt || fail "phase 2 does not say its data is packed"
grep -q "packed, up to 3 sequences a row" p2_whole.txt || fail "the summary does not name the packing"

echo "== phase 2 preempted at step 5 (between checkpoints) and resumed"
set +e
JOULE_FAULT="preempt:rank=0,step=5" mpi -x JOULE_FAULT "$joule" train --config phase2.toml > p2_a.txt 2>&1
rc=$?
set -e
[[ $rc -eq 75 ]] || { cat p2_a.txt; fail "phase 2 preemption exit code $rc, expected 75"; }
mpi "$joule" train --config phase2.toml --resume auto > p2_b.txt 2>&1 || { cat p2_b.txt; fail "phase 2, resumed"; }
python3 "$here/compare_weights.py" p2/final/model.safetensors p2_whole/final/model.safetensors > cmp.txt ||
  { cat cmp.txt; fail "phase 2 preempted and resumed differs from phase 2 in one go"; }

python3 - <<'PY' || fail "phase 2's start, counts or position embeddings"
import json, struct

def rows(path):
    return [json.loads(l) for l in open(path) if l.strip()]

def tensor(path, name):
    data = open(path, "rb").read()
    n = struct.unpack("<Q", data[:8])[0]
    h = json.loads(data[8:8 + n])[name]
    a, b = h["data_offsets"]
    return h["shape"], struct.unpack(f"<{(b - a) // 4}f", data[8 + n + a:8 + n + b])

p1 = [r for r in rows("p1/metrics.jsonl") if "loss" in r and "eval" not in r.get("kind", "")]
p2 = [r for r in rows("p2_whole/metrics.jsonl") if "loss" in r and "eval" not in r.get("kind", "")]
# Phase 1's weights: phase 2's first interval is near phase 1's last, far below a fresh model's ~ln(600) + ln(2).
fresh = 6.4 + 0.69
assert p2[0]["loss"] < p1[-1]["loss"] + 1.0 and p2[0]["loss"] < fresh - 0.5, (p1[-1]["loss"], p2[0]["loss"])
# A fresh step count: phase 2's steps start at 1 and its learning rate is its own schedule's, not phase 1's 30 steps
# on (which the decay would have taken to nothing).
assert p2[0]["step"] == 2 and p2[0]["lr"] > 1e-3, p2[0]
# Sequences, not rows: more sequences than rows trained (10 steps x 8 rows), and the summary agrees with the log.
s = json.load(open("p2_whole/summary.json"))
assert s["sequences"] > 10 * 8 * 1.3, s["sequences"]
assert s["sequences"] == p2[-1]["sequences"], (s["sequences"], p2[-1]["sequences"])
packing = json.load(open("phase2/metadata.json"))["packing"]
assert s["workload"]["pack"] == 3, s["workload"]
assert abs(s["workload"]["packing_efficiency"] - packing["efficiency_after"]) < 1e-9, (s["workload"], packing)
assert packing["efficiency_after"] > 1.5 * packing["efficiency_before"], packing
assert s["workload"]["seq_len"] == 256, s["workload"]
# The positions phase 1 never reached (64..255) were trained in phase 2; phase 1 left them at their initialization.
shape, before = tensor("p1/final/model.safetensors", "bert.embeddings.position_embeddings.weight")
_, after = tensor("p2_whole/final/model.safetensors", "bert.embeddings.position_embeddings.weight")
h = shape[1]
moved = sum(1 for i in range(64 * h, 256 * h) if before[i] != after[i])
assert moved > 0.9 * 192 * h, moved
print(f"phase 2: first loss {p2[0]['loss']:.3f} (phase 1 ended {p1[-1]['loss']:.3f}), {s['sequences']} sequences "
      f"in 80 rows, packing efficiency {s['workload']['packing_efficiency']:.3f}")
PY

echo "== each phase's MLLOG and TensorBoard logs"
for run in p1 p2 p2_whole; do
  python3 - "$run" <<'PY' || fail "$run/mllog.txt"
import json, sys
run = sys.argv[1]
lines = [l for l in open(f"{run}/mllog.txt") if l.strip()]
assert all(l.startswith(":::MLLOG ") for l in lines), run
keys = [json.loads(l[len(":::MLLOG "):])["key"] for l in lines]
for key in ("init_start", "run_start", "eval_accuracy", "run_stop"):
    assert key in keys, (run, key)
assert keys.count("run_start") == 1 and keys.count("run_stop") == 1, run
PY
  [[ -n $(ls "$run"/tb/events.out.tfevents.* 2> /dev/null) ]] || fail "$run has no TensorBoard events"
  if python3 -c "import mlperf_logging" 2> /dev/null; then
    python3 "$here/../../tools/check/mlperf.py" "$run" > "mlperf_$run.txt" || { cat "mlperf_$run.txt"; fail "mlperf.py $run"; }
  fi
  if python3 -c "import tbparse" 2> /dev/null; then
    python3 "$here/../../tools/check/tb_events.py" "$run" | tail -n 1 | grep -q "tensorboard check: ok" ||
      fail "tb_events.py $run"
  fi
done
echo "phase2: ok"
