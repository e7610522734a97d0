#!/usr/bin/env bash
# Fault injection end to end at 2 ranks (JOULE_FAULT, trainer/fault.h). Against an uninterrupted run:
#  1. kill -9 of one rank at random steps: every rank ends non-zero within 60 s, the newest complete
#     checkpoint verifies, and --resume auto ends with bit-identical final weights;
#  2. kill -9 inside a checkpoint write (at three stages): resume takes the previous checkpoint, same weights;
#  3. a stalled rank, before a step or inside a checkpoint write: the others fail with a timeout naming the operation
#     and rank within about the collective timeout, no hang; bench train and bench comm likewise (--collective-timeout),
#     a rank stopped by SIGSTOP while they measure;
#  4. NaN in the loss: the steps are skipped and counted; N consecutive ones stop the run on every rank;
#  5. a shard corrupted mid-run: an error naming the shard, every rank ends non-zero;
#  6. a rank whose listing of checkpoints/ lags rank 0's (shared file system): it loads rank 0's choice, says so,
#     and the final weights are the uninterrupted run's;
#  7. a failing fsync during a checkpoint write: an error naming the file and EIO, no COMPLETE marker, and
#     --resume auto takes the previous checkpoint.
# usage: faults.sh JOULE MPIEXEC WORKDIR      (JOULE_FAULT_SEED=N repeats a set of random steps)
set -uo pipefail
joule=$1 mpiexec=$2 work=$3
MPI_EXTRA=(-x JOULE_FAULT)
source "$(dirname "$0")/../support/e2e_setup.sh"
e2e_workdir "$work"
export JOULE_FAULT=""

e2e_make_data 400 3 600 --dupe-factor 3
cat > run.toml <<'TOML'
[model]
config = "bert-tiny"
[data]
train = "shards/train"
[train]
steps = 30
micro_batch = 8
seed = 7
log_every_steps = 5
[optimizer]
lr = 1e-2
warmup_fraction = 0.1
[checkpoint]
every_steps = 5
keep = 10
TOML

# Runs `joule train ARGS` at 2 ranks, expecting it to fail: LOG is its output; fails on exit 0, a hang
# (timeout) or an end later than BOUND seconds.
faulty() {
  local log=$1 bound=$2
  shift 2
  local start=$(date +%s)
  timeout 300 "$mpiexec" "${MPI_ARGS[@]}" "$joule" train "$@" > "$log" 2>&1
  local rc=$? elapsed=$(( $(date +%s) - start ))
  echo "   exit code $rc after ${elapsed}s"
  [[ $rc -ne 0 ]] || { cat "$log"; fail "$log: the job exited 0"; }
  [[ $rc -ne 124 ]] || { cat "$log"; fail "$log: the job hung"; }
  (( elapsed <= bound )) || { cat "$log"; fail "$log: the job took ${elapsed}s to end (bound ${bound}s)"; }
}
# The step of the newest checkpoint that verifies (joule export picks it and verifies every checksum).
newest_complete() {
  "$joule" export --checkpoint "$1" --out "$1.export" 2>/dev/null | grep -o 'step_[0-9]*' | tail -1
}

echo "== 0. uninterrupted run"
mpi "$joule" train --config run.toml --run-dir ref > ref.log 2>&1 || { cat ref.log; fail "the reference run failed"; }

echo "== 1. kill -9 of one rank at random steps"
seed=${JOULE_FAULT_SEED:-$(( $(date +%s) % 32768 ))}
RANDOM=$seed
echo "   JOULE_FAULT_SEED=$seed (set it to repeat these steps)"
for i in 1 2 3; do
  step=$(( RANDOM % 29 + 1 )) victim=$(( RANDOM % 2 ))
  run=kill$i
  echo "-- rank $victim killed after step $step"
  JOULE_FAULT="kill:rank=$victim,step=$step" faulty $run.log 60 --config run.toml --run-dir $run
  grep -q "\[rank $victim\] fault injection: SIGKILL after step $step" $run.log || { cat $run.log; fail "$run: the fault did not fire"; }
  expected=$(( (step - 1) / 5 * 5 ))  # killed before step N's own checkpoint
  if (( expected > 0 )); then
    got=$(newest_complete $run)
    [[ "$got" == "$(printf 'step_%08d' $expected)" ]] || fail "$run: newest complete checkpoint is '$got', expected step $expected"
  fi
  JOULE_FAULT="" mpi "$joule" train --config run.toml --run-dir $run --resume auto > $run.resume.log 2>&1 || { cat $run.resume.log; fail "$run: resume failed"; }
  cmp ref/final/model.safetensors $run/final/model.safetensors || fail "$run: final weights differ from the uninterrupted run"
done

echo "== 2. kill -9 inside the checkpoint write of step 15"
for stage in model manifest renamed; do
  run=ckpt_$stage
  JOULE_FAULT="kill-in-checkpoint:rank=0,step=15,stage=$stage" faulty $run.log 60 --config run.toml --run-dir $run
  JOULE_FAULT="" mpi "$joule" train --config run.toml --run-dir $run --resume auto > $run.resume.log 2>&1 || { cat $run.resume.log; fail "$run: resume failed"; }
  grep -q "warning: skipping checkpoint $run/checkpoints/step_00000015.*interrupted" $run.resume.log || { cat $run.resume.log; fail "$run: the torn checkpoint was not reported"; }
  grep -q "resumed from $run/checkpoints/step_00000010 at step 10" $run.resume.log || { cat $run.resume.log; fail "$run: did not resume from step 10"; }
  cmp ref/final/model.safetensors $run/final/model.safetensors || fail "$run: final weights differ from the uninterrupted run"
done

echo "== 3. a stalled rank (collective timeout 5 s)"
JOULE_FAULT="stall:rank=1,step=7,seconds=600" faulty stall.log 60 --config run.toml --run-dir stall --set train.collective_timeout_seconds=5
# Rank 1 stalls before its step: the step's first collective (its prediction counts, trainer/train_step.h) times out.
grep -q "\[rank 0\] .*all_reduce 'the step's prediction and sequence counts' of 16 bytes did not finish within 5 s" stall.log ||
  { cat stall.log; fail "no timeout naming operation and rank"; }
# Rank 1 stalls inside step 10's checkpoint, after writing its generator state: rank 0's wait for every rank's files
# ends at the collective timeout plus the checkpoint's bytes at 10 MB/s (this bert-tiny: 7.9 MB, 0.8 s), not at 600 s.
JOULE_FAULT="stall:rank=1,step=10,stage=rng,seconds=600" faulty stall_in_checkpoint.log 60 --config run.toml --run-dir stall_in_checkpoint --set train.collective_timeout_seconds=5
grep -q "\[rank 0\] .*barrier 'checkpoint step_00000010: every rank writing its files' .*did not finish within 5\.[0-9] s" stall_in_checkpoint.log ||
  { cat stall_in_checkpoint.log; fail "no timeout naming the checkpoint's wait and the rank"; }

# The benches wait for the other ranks as train does: a rank stopped (SIGSTOP) while they measure leaves the other's
# next wait unanswered, and the bench ends at --collective-timeout with the operation and the flag named.
# stall_bench NAME READY ARGS...: run `joule ARGS` on 2 ranks (output in NAME.log), stop rank 1 two seconds after
# NAME.log has a line starting READY, and check the bench failed within 60 s naming the rank and a 5 s timeout.
stall_bench() {
  local name=$1 ready=$2
  shift 2
  timeout -k 10 120 "$mpiexec" "${MPI_ARGS[@]}" "$joule" "$@" --collective-timeout 5 > "$name.log" 2>&1 &
  local launcher=$!
  for _ in $(seq 1 600); do grep -q "^$ready" "$name.log" 2>/dev/null && break; sleep 0.1; done
  grep -q "^$ready" "$name.log" || { kill $launcher; cat "$name.log"; fail "$name: no line '$ready' within 60 s"; }
  sleep 2
  victim=$(e2e_rank_pid " $*" 1)
  victim_cmdline=$(tr '\0' ' ' < /proc/$victim/cmdline 2>/dev/null)
  [[ -n "$victim" && -n "$victim_cmdline" ]] || { kill $launcher; cat "$name.log"; fail "$name: no process of rank 1 to stop"; }
  trap release_victim EXIT
  local start rc elapsed
  start=$(date +%s)
  kill -STOP "$victim"
  wait $launcher
  rc=$? elapsed=$(( $(date +%s) - start ))
  release_victim
  trap - EXIT
  echo "   $name, rank 1 stopped: exit code $rc after ${elapsed}s"
  [[ $rc -ne 0 ]] && (( elapsed <= 60 )) || { cat "$name.log"; fail "$name did not fail within 60 s"; }
  grep -q "\[rank 0\] .*did not finish within 5 s" "$name.log" || { cat "$name.log"; fail "$name: no timeout naming the rank"; }
  grep -q "what to do: .*raise --collective-timeout" "$name.log" || { cat "$name.log"; fail "$name: a hint for another command"; }
}
# Whatever ends the job, the stopped rank is continued and killed (if it is still that process).
release_victim() {
  [[ -n "$victim_cmdline" && "$(tr '\0' ' ' < /proc/$victim/cmdline 2>/dev/null)" == "$victim_cmdline" ]] || return 0
  kill -CONT "$victim" 2>/dev/null
  kill -KILL "$victim" 2>/dev/null
}
stall_bench bench_train_stall "initial weights" bench train --config bert-tiny --warmup 0 --steps 100000 \
  --micro-batch 2 --seq-len 16 --max-predictions 2
# A collective of the steps: a gradient bucket's, or the step's counts.
grep -Eq "\[rank 0\] .*all_reduce '(gradient bucket [0-9]+ of [0-9]+|the step's prediction and sequence counts)' .*did not finish" \
  bench_train_stall.log || { cat bench_train_stall.log; fail "bench train: the timeout names no step's collective"; }
# bench comm's ping-pong: rank 0 waits in its barrier (the communicator's) or in a hop (its own MPI calls).
stall_bench bench_comm_stall "ping-pong rank 0" bench comm --pingpong --iterations 100000 --gradient-model none
grep -Eq "\[rank 0\] .*ping-pong of [0-9]+ bytes.* did not finish" bench_comm_stall.log ||
  { cat bench_comm_stall.log; fail "bench comm: the timeout names no ping-pong"; }

echo "== 4. NaN loss: two skipped steps, then a run that stops after 4 in a row"
JOULE_FAULT="nan:rank=1,step=7,count=2" mpi "$joule" train --config run.toml --run-dir nan2 > nan2.log 2>&1 || { cat nan2.log; fail "a run with two NaN steps failed"; }
grep -q '"nonfinite_skipped_steps": 2' nan2/summary.json || fail "summary.json does not count 2 skipped steps"
grep -q "warning: step 8: gradient norm .*update skipped (2 in a row, 2 in the run)" nan2.log || { cat nan2.log; fail "no skip warning"; }
# The rank whose loss was NaN names its rows (shard and rows); the other rank's loss was finite: it names none.
grep -Eq "warning: step 7, rank 1: NaN/Inf loss in [0-9]+ micro-batch\(es\), rows: [^ ]+\.hdf5 rows [0-9]+\.\.[0-9]+" nan2.log ||
  { cat nan2.log; fail "the NaN step's rows are not named"; }
! grep -q "rank 0: NaN/Inf loss" nan2.log || { cat nan2.log; fail "rank 0 named rows although its loss was finite"; }
JOULE_FAULT="nan:rank=0,step=12,count=100" faulty nanstop.log 60 --config run.toml --run-dir nanstop --set train.max_nonfinite_steps=4
for r in 0 1; do
  grep -q "\[rank $r\] joule train: error: steps 12..15: NaN/Inf gradients in 4 consecutive steps .*Newest checkpoint: nanstop/checkpoints/step_00000010" nanstop.log ||
    { cat nanstop.log; fail "rank $r did not stop with the NaN error"; }
done

echo "== 5. a shard corrupted mid-run"
cp -r shards shards_copy
JOULE_FAULT="corrupt-shard:rank=1,step=8" faulty corrupt.log 60 --config run.toml --run-dir corrupt --set data.train=shards_copy/train
grep -q "joule train: error: .*shards_copy/train/part_0000[01].hdf5: " corrupt.log || { cat corrupt.log; fail "no error naming the corrupt shard"; }

echo "== 6. rank 1 lists an older newest checkpoint than rank 0: every rank resumes rank 0's choice"
JOULE_FAULT="kill:rank=0,step=17" faulty stale.log 60 --config run.toml --run-dir stale
JOULE_FAULT="stale-checkpoint-view:rank=1" mpi "$joule" train --config run.toml --run-dir stale --resume auto > stale.resume.log 2>&1 ||
  { cat stale.resume.log; fail "stale view: resume failed"; }
grep -q "\[rank 1\] note: this rank lists stale/checkpoints/step_00000010 as the newest checkpoint; rank 0 chose stale/checkpoints/step_00000015" \
  stale.resume.log || { cat stale.resume.log; fail "stale view: rank 1 did not report its lagging view"; }
cmp ref/final/model.safetensors stale/final/model.safetensors || fail "stale view: final weights differ from the uninterrupted run"

echo "== 7. fsync fails (EIO) during the checkpoint of step 15"
JOULE_FAULT="fail-fsync:rank=0,step=15" faulty fsync.log 60 --config run.toml --run-dir fsync
grep -q "\[rank 0\] joule train: error: fsync/checkpoints/step_00000015.tmp/.*: fsync failed: Input/output error (the checkpoint is incomplete" fsync.log ||
  { cat fsync.log; fail "no error naming the file and EIO"; }
[[ ! -e fsync/checkpoints/step_00000015/COMPLETE ]] || fail "a checkpoint whose fsync failed was marked COMPLETE"
JOULE_FAULT="" mpi "$joule" train --config run.toml --run-dir fsync --resume auto > fsync.resume.log 2>&1 || { cat fsync.resume.log; fail "fsync: resume failed"; }
grep -q "resumed from fsync/checkpoints/step_00000010 at step 10" fsync.resume.log || { cat fsync.resume.log; fail "fsync: did not resume from step 10"; }
cmp ref/final/model.safetensors fsync/final/model.safetensors || fail "fsync: final weights differ from the uninterrupted run"
echo "PASS"
