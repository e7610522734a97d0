#!/usr/bin/env bash
# joule under a real (private, one-host) Slurm cluster:
#  1. launch/slurm/demo.sbatch with 2 tasks (srun --mpi=pmix): the job completes and writes its summary;
#  2. the same job signalled mid-run with USR1 through Slurm (as --signal=USR1@T does): joule checkpoints
#     and exits 75, the script requeues it, and the requeued job continues with --resume auto until done;
#     its final weights are byte-identical to job 1's (uninterrupted) weights.
# The cluster is torn down on exit, also on failure.
# usage: slurm_jobs.sh JOULE SOURCE_DIR WORKDIR        (exit 77 = skipped: not root)
set -euo pipefail
joule=$(readlink -f "$1") src=$(readlink -f "$2") work=$3
if [[ $(id -u) -ne 0 ]]; then echo "SKIP: the Slurm test runs slurmd and needs root"; exit 77; fi
for tool in munged slurmctld slurmd sbatch srun; do
  command -v $tool >/dev/null || { echo "FAIL: $tool not found (bash tools/setup.sh installs slurm-wlm and munge)"; exit 1; }
done
rm -rf "$work" && mkdir -p "$work" && work=$(readlink -f "$work") && cd "$work"
source "$src/tests/support/e2e_setup.sh"  # e2e_make_data; this test's own fail() below also shows the Slurm logs
fail() { echo "FAIL: $*"; for f in "$work"/slurm-*.out; do [[ -f $f ]] && { echo "----- $f"; tail -n 40 "$f"; }; done; slurm_dump_logs; exit 1; }

source "$src/tests/slurm/cluster.sh"
trap slurm_stop EXIT
slurm_start "$work/cluster"
srun --mpi=list 2>&1 | grep -q pmix || fail "this Slurm has no PMIx plugin (srun --mpi=list)"

e2e_make_data 400 3 600 --dupe-factor 3 --eval-documents 40

# The demo job script as users submit it, from the source tree (its configs/demo-tiny.toml), with joule on PATH; the extra arguments go to
# `joule train`.
export PATH=$(dirname "$joule"):$PATH
steps=${JOULE_SLURM_TEST_STEPS:-300}
args=(--data "$work/shards/train" --set data.eval="$work/shards/eval" --set train.micro_batch=16 --set train.seed=5
      --steps "$steps" --set checkpoint.every_steps=1000000 --set eval.every_steps=$steps --set eval.max_batches=4)

restarts() { scontrol show job "$1" | grep -o 'Restarts=[0-9]*' | cut -d= -f2; }

echo "== 1. demo.sbatch, 2 tasks, uninterrupted"
t0=$(date +%s)
a=$(sbatch --parsable --chdir="$src" --output="$work/slurm-%j.out" "$src/launch/slurm/demo.sbatch" \
      "${args[@]}" --run-dir "$work/a") || fail "sbatch refused the demo job"
slurm_wait_job "$a" 600 || fail "demo job $a did not complete"
echo "job $a completed in $(( $(date +%s) - t0 )) s"
out=slurm-$a.out
grep -q "training-cost summary" "$out" || fail "no training-cost summary in $out"
grep -q "2 rank(s) on 1 node(s)" "$out" || fail "the job did not run on 2 ranks"
python3 - "$work/a/summary.json" "$steps" <<'PY' || fail "summary.json of job $a"
import json, sys
s = json.load(open(sys.argv[1])); steps = int(sys.argv[2])
print("summary:", {k: s[k] for k in ("sequences", "segments", "world_size") if k in s})
assert s["sequences"] == steps * 16 * 2 and s["segments"] == 1, s
PY
[[ -f a/final/model.safetensors ]] || fail "no final weights from job $a"

echo "== 2. the same job, signalled mid-run by Slurm (scancel --signal=USR1, the signal --signal=USR1@T sends), requeued"
# Slurm sends the time-limit signal "up to 60 s earlier than specified", so a short --time cannot place it
# mid-run reliably; scancel delivers the same signal through the same slurmctld -> slurmd -> task path.
t0=$(date +%s)
b=$(sbatch --parsable --chdir="$src" --output="$work/slurm-%j.out" \
      "$src/launch/slurm/demo.sbatch" "${args[@]}" --run-dir "$work/b") || fail "sbatch refused the second job"
signal_at=$(( steps / 3 ))
for _ in $(seq 1 1200); do grep -q "^step $signal_at/" "slurm-$b.out" 2>/dev/null && break; sleep 0.1; done
grep -q "^step $signal_at/" "slurm-$b.out" || fail "job $b did not reach step $signal_at within 120 s"
scancel --signal=USR1 "$b" || fail "scancel --signal=USR1 $b"
echo "job $b signalled at step $signal_at"
slurm_wait_job "$b" 900 || fail "job $b did not complete after its requeue"
n=$(restarts "$b")
echo "job $b completed in $(( $(date +%s) - t0 )) s after $n requeue(s)"
out=slurm-$b.out
(( n >= 1 )) || fail "job $b was never preempted (Restarts=$n): the signal did not arrive mid-run"
grep -q "preempted (signal)" "$out" || fail "no preemption notice in $out"
grep -q "resumed from .*step_" "$out" || fail "the requeued job did not resume from a checkpoint"
python3 -c "import json,sys; s=json.load(open('$work/b/summary.json')); assert s['segments'] >= 2 and s['sequences'] == $steps*32, s" \
  || fail "summary.json of job $b does not cover every segment"
cmp a/final/model.safetensors b/final/model.safetensors || fail "the preempted+requeued job's weights differ from the uninterrupted job's"
echo "PASS"
