#!/usr/bin/env bash
# One run on any rank layout, dropout on: the same seed and global batch trained as 1 x 16, 2 x 8, 4 x 4 and 2 x 4 x 2
# (ranks x micro-batch x accumulation), with and without optimizer.shard = zero1, and a 4-rank run resumed on 2 ranks,
# end with the same weights to fp32 summation order (1e-4 of each tensor's scale; before dropout was keyed by rows,
# 1 x 16 and 2 x 8 ended 2e-2 apart). A run without dropout ends far from them: the masks are drawn, and drawn alike.
# usage: layout_free.sh JOULE MPIEXEC WORKDIR
set -euo pipefail
joule=$1 mpiexec=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../support/e2e_setup.sh"
e2e_workdir "$work"

e2e_make_data 300 11 500
grep -q '"hidden_dropout_prob": 0.1' "$here/../../configs/models/bert-tiny.json" || fail "bert-tiny has no dropout"
cat > run.toml <<'TOML'
[model]
config = "bert-tiny"
[data]
train = "shards/train"
[train]
steps = 8
global_batch = 16
precision = "fp32"
seed = 3
log_every_steps = 4
[optimizer]
lr = 1e-2
warmup_fraction = 0.25
[checkpoint]
every_steps = 4
keep = 5
TOML
# NAME RANKS MICRO_BATCH [joule train arguments]
run() {
  local name=$1 n=$2 micro=$3
  shift 3
  "$mpiexec" -n "$n" "${MPI_ARGS[@]:2}" "$joule" train --config run.toml --run-dir "$name" \
    --set "train.micro_batch=$micro" "$@" > "$name.log" 2>&1 || { cat "$name.log"; fail "$name"; }
}
# As in zero1_resume.sh: the attention's key biases only add rounding noise, which LAMB's sign steps redraw.
noise=attention.self.key.bias
same() {
  echo -n "$1 against 1x16: "
  python3 "$here/compare_weights.py" r1x16/final/model.safetensors "$1/final/model.safetensors" --rtol 1e-4 \
    --skip "$noise" || fail "$1 did not train the 1 x 16 run"
}

run r1x16 1 16
run r2x8 2 8
run r4x4 4 4
run r2x4x2 2 4
run r4x4-zero1 4 4 --set optimizer.shard=zero1
grep -q "global batch 16 = 4 x 2 x 2 (micro-batch x accumulation x ranks)" r2x4x2.log || { cat r2x4x2.log; fail "2 x 4 did not accumulate 2"; }
for name in r2x8 r4x4 r2x4x2 r4x4-zero1; do same "$name"; done

echo "== a 4-rank run resumed on 2 ranks"
run r4-to-2 2 8 --resume r4x4/checkpoints/step_00000004
grep -q "resumed from .*step_00000004 at step 4" r4-to-2.log || { cat r4-to-2.log; fail "not resumed at step 4"; }
same r4-to-2

echo "== without dropout: another run"
sed -e 's/"hidden_dropout_prob": 0.1/"hidden_dropout_prob": 0.0/' \
    -e 's/"attention_probs_dropout_prob": 0.1/"attention_probs_dropout_prob": 0.0/' \
    "$here/../../configs/models/bert-tiny.json" > tiny-nodropout.json
run nodrop 1 16 --set model.config=tiny-nodropout.json
if python3 "$here/compare_weights.py" r1x16/final/model.safetensors nodrop/final/model.safetensors --rtol 1e-3 \
     --skip "$noise" > nodrop.cmp; then
  cat nodrop.cmp
  fail "dropout on and off trained the same weights: no masks were drawn"
fi
echo "PASS"
