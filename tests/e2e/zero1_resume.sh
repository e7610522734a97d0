#!/usr/bin/env bash
# ZeRO-1 (optimizer.shard = zero1) end to end, at 4 and 2 ranks on this host:
#  1. a zero1 checkpoint holds one optimizer file per rank, and resuming it on the same ranks is bit-exact;
#  2. a checkpoint resumes on another world size and the other sharding — 4 -> 2, 2 -> 4, zero1 -> none, none ->
#     zero1 — at the step and data position it was saved at: the final weights equal the uninterrupted run's to fp32
#     rounding (the global batch stays 16 sequences: 4 ranks x 4, or 2 ranks x 4 x 2 micro-batches), dropout on (its
#     masks are keyed by the rows, not the ranks: models/dropout.h). These run in fp32: in bf16 another world size's summation order is amplified by bf16 roundings to ~1e-3 of a tensor's scale
#     (measured 3.8e-3 for none resumed 2 -> 4 ranks), as much as a wrong data position would differ;
#  3. bf16 (on a CPU that runs it natively): the Linear weights held in bf16 from fp32 master shards resume bit-exactly
#     on the same ranks, and zero1 equals none bit for bit at 2 ranks.
# usage: zero1_resume.sh JOULE MPIEXEC WORKDIR
set -euo pipefail
joule=$1 mpiexec=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../support/e2e_setup.sh"
e2e_workdir "$work"

e2e_make_data 300 11 500
cat > run.toml <<'TOML'
[model]
config = "bert-tiny"
[data]
train = "shards/train"
[train]
steps = 8
micro_batch = 4
global_batch = 16
precision = "fp32"
# The comparisons name the fp32 library: auto times oneDNN and the BLAS at start-up, and under load two fresh runs may
# pick different ones (a resume keeps its checkpoint's since; before, z4again once took the BLAS where z4 had oneDNN).
fp32_gemm = "blas"
seed = 3
log_every_steps = 4
[optimizer]
lr = 1e-2
warmup_fraction = 0.25
shard = "zero1"
[checkpoint]
every_steps = 4
keep = 5
TOML
# ranks N, then joule train arguments
run() {
  local n=$1
  shift
  "$mpiexec" -n "$n" "${MPI_ARGS[@]:2}" "$joule" train --config run.toml "$@"  # MPI_ARGS: -n 2, then the rest
}
compare() { python3 "$here/compare_weights.py" "$@"; }
# The attention's key biases add the same amount to every score of a query, which softmax ignores: their gradients are
# rounding noise, and LAMB (no trust ratio on biases) steps along its sign, which another summation order redraws.
# Across world sizes they are left out; the weights that learn are compared.
noise=attention.self.key.bias
ckpt=checkpoints/step_00000004

echo "== 1. zero1 at 4 ranks: shards, bit-exact resume on the same ranks"
run 4 --run-dir z4 > z4.log 2>&1 || { cat z4.log; fail "zero1 at 4 ranks"; }
for r in 0 1 2 3; do
  [[ -f z4/$ckpt/optimizer_shard_${r}_of_4.safetensors ]] || fail "no optimizer shard of rank $r"
done
[[ ! -f z4/$ckpt/optimizer.safetensors ]] || fail "a zero1 checkpoint also wrote the whole optimizer state"
grep -q '"shard": "zero1"' z4/$ckpt/manifest.json || fail "the manifest does not describe the sharding"
run 4 --run-dir z4again --resume "z4/$ckpt" > z4again.log 2>&1 || { cat z4again.log; fail "zero1 resume at 4 ranks"; }
grep -q "resumed from .*step_00000004 at step 4" z4again.log || { cat z4again.log; fail "not resumed at step 4"; }
cmp z4/final/model.safetensors z4again/final/model.safetensors || fail "a zero1 resume on the same ranks is not bit-exact"

echo "== 2. other world sizes and shardings"
# NAME RANKS FROM REFERENCE [--set ...]: resume FROM's step-4 checkpoint on RANKS ranks; its final weights against
# REFERENCE's (the uninterrupted run), to fp32 rounding.
resume_case() {
  local name=$1 n=$2 from=$3 reference=$4
  shift 4
  run "$n" --run-dir "$name" --resume "$from/$ckpt" "$@" > "$name.log" 2>&1 || { cat "$name.log"; fail "$name"; }
  grep -q "resumed from .*step_00000004 at step 4" "$name.log" || { cat "$name.log"; fail "$name: not resumed at step 4"; }
  python3 - "$name" "$reference" <<'PY' || fail "$name: not where the uninterrupted run is (step, sequences, data position)"
import json, sys
a, b = (json.load(open(f"{d}/checkpoints/step_00000008/trainer_state.json")) for d in sys.argv[1:])
for key in ("step", "sequences", "epoch", "position"):
    assert a[key] == b[key], (key, a[key], b[key])
PY
  echo -n "$name: "
  compare "$reference/final/model.safetensors" "$name/final/model.safetensors" --rtol 1e-4 --skip "$noise" ||
    fail "$name: the final weights are not the uninterrupted run's"
}
run 2 --run-dir z2 > z2.log 2>&1 || { cat z2.log; fail "zero1 at 2 ranks"; }
run 2 --run-dir n2 --set optimizer.shard=none > n2.log 2>&1 || { cat n2.log; fail "none at 2 ranks"; }
echo -n "zero1 against none, 2 ranks, 8 steps (bit-identical at 2 ranks): "
compare n2/final/model.safetensors z2/final/model.safetensors || fail "zero1 and none trained apart at 2 ranks"
python3 - <<'PY' || fail "the summaries do not report the optimizer state per rank"
import json
z, n = (json.load(open(f"{d}/summary.json"))["memory"] for d in ("z4", "n2"))
assert (z["optimizer_shard"], n["optimizer_shard"]) == ("zero1", "none"), (z, n)
ratio = z["optimizer_state_bytes_per_rank"] * 4 / n["optimizer_state_bytes_per_rank"]
print(f"optimizer state per rank: zero1 at 4 ranks {z['optimizer_state_bytes_per_rank']:.0f} bytes, none "
      f"{n['optimizer_state_bytes_per_rank']:.0f}: x4 = {ratio:.4f} of it")
assert 1 <= ratio < 1.05, ratio  # 1/4 of it, and the last block of each bucket's padding at most
PY
resume_case z4-to-2 2 z4 z4
resume_case z2-to-4 4 z2 z2
resume_case z4-to-none2 2 z4 z4 --set optimizer.shard=none
resume_case none2-to-z4 4 n2 n2
grep -q 'note: resuming with optimizer.shard = "none" (the checkpoint.s: "zero1")' z4-to-none2.log ||
  { cat z4-to-none2.log; fail "the change of sharding is not said"; }
# The global batch stays: the accumulation that follows it on another world size is a note, not a warning.
grep -q "note: resuming with train.accumulation = 2 (the checkpoint's: 1): follows train.global_batch = 16" z4-to-2.log ||
  { cat z4-to-2.log; fail "the accumulation that keeps the global batch is not a note"; }
! grep -q "^warning: resuming" z4-to-2.log z2-to-4.log z4-to-none2.log none2-to-z4.log || fail "a resume warned"

echo "== 3. bf16: weights held in bf16 from fp32 master shards"
if grep -Eqw 'avx512_bf16|amx_bf16' /proc/cpuinfo; then
  run 4 --run-dir b4 --set train.precision=bf16 > b4.log 2>&1 || { cat b4.log; fail "zero1 bf16 at 4 ranks"; }
  run 4 --run-dir b4again --set train.precision=bf16 --resume "b4/$ckpt" > b4again.log 2>&1 ||
    { cat b4again.log; fail "zero1 bf16 resume at 4 ranks"; }
  cmp b4/final/model.safetensors b4again/final/model.safetensors || fail "a bf16 zero1 resume is not bit-exact"
  run 2 --run-dir b2 --set train.precision=bf16 > b2.log 2>&1 || { cat b2.log; fail "zero1 bf16 at 2 ranks"; }
  run 2 --run-dir bn2 --set train.precision=bf16 --set optimizer.shard=none > bn2.log 2>&1 ||
    { cat bn2.log; fail "none bf16 at 2 ranks"; }
  echo -n "bf16 zero1 against none, 2 ranks: "
  compare bn2/final/model.safetensors b2/final/model.safetensors || fail "bf16 zero1 and none trained apart"
  python3 - b2/final/model.safetensors <<'PY' || fail "final/ of a bf16 zero1 run is not fp32"
import json, struct, sys
with open(sys.argv[1], "rb") as f:
    header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
dtypes = {v["dtype"] for k, v in header.items() if k != "__metadata__"}
assert dtypes == {"F32"}, dtypes
PY
else
  echo "skipped: no AVX512-BF16 or AMX-BF16 on this CPU"
fi
echo "PASS"
