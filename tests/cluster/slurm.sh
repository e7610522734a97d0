#!/usr/bin/env bash
# Slurm across 16 emulated nodes: slurmctld plus one slurmd per node (its own NodeName, address, spool, pid file and
# log; tests/slurm/cluster.sh), and launch/slurm/bert-large-16node.sbatch submitted as it is in the repository. The
# only overrides are sbatch's command-line options that fit the job onto this host (one task and one CPU per node, no
# GPUs) and `joule train` arguments after the script name that make it small (bert-tiny, the test's shards, 12 steps).
# The job runs through `srun --mpi=pmix` on 16 nodes and is preempted mid-run (USR1 through Slurm, the signal
# --signal=USR1@600 sends): joule checkpoints and exits 75, the script requeues the job, and the requeued job
# resumes on the 16 nodes and finishes; its summary says 16 ranks on 16 nodes and covers every segment, and its final
# weights are byte-identical to those of the same job run uninterrupted.
# usage: slurm.sh JOULE SOURCE_DIR WORKDIR     exits 77 (ctest: skipped) with the reason when namespaces are unavailable
set -uo pipefail
joule=$(readlink -f "$1") src=$(readlink -f "$2") work=$3
here=$(cd "$(dirname "$0")" && pwd)
source "$here/cluster.sh"
cluster_test_begin "$work"
work=$(pwd)
for tool in munged slurmctld slurmd sbatch srun nsenter; do
  command -v $tool > /dev/null || fail "$tool not found (bash tools/setup.sh installs slurm-wlm and munge)"
done
source "$src/tests/slurm/cluster.sh"
fail() {
  echo "FAIL: $*"
  local f
  for f in "$work"/runs/*.out; do [[ -f $f ]] && { echo "----- $f"; tail -n 40 "$f"; }; done
  slurm_dump_logs
  exit 1
}

nodes=16 steps=12 signal_at=5
e2e_make_data 400 3 600 --eval-documents 40
cluster_up $nodes 1gbit || fail "could not make $nodes emulated nodes"
trap 'slurm_stop; cluster_down' EXIT
slurm_start "$work/slurm" $nodes || fail "Slurm did not start on $nodes emulated nodes"
srun --mpi=list 2>&1 | grep -q pmix || fail "this Slurm has no PMIx plugin (srun --mpi=list)"

# The job's directory as a user's: the repository's configs, and runs/ for the script's --output.
ln -s "$src/configs" configs && mkdir runs
export PATH=$(dirname "$joule"):$PATH OMP_NUM_THREADS=1
fit=(--ntasks-per-node=1 --cpus-per-task=1 --gpus-per-node=0)
small=(--set model.config=bert-tiny --data "$work/shards/train" --eval-data "$work/shards/eval" --steps $steps
       --set train.micro_batch=2 --set train.global_batch=32 --set train.threads=1 --set train.log_every_steps=1
       --set checkpoint.every_steps=4 --set eval.every_steps=$steps --set eval.batch=8 --set eval.max_batches=2)

echo "== the job uninterrupted (run directory runs/straight), for the final weights"
t0=$SECONDS
straight=$(sbatch --parsable "${fit[@]}" "$src/launch/slurm/bert-large-16node.sbatch" "${small[@]}" --run-dir runs/straight) ||
  fail "sbatch refused bert-large-16node.sbatch"
slurm_wait_job "$straight" 600 || fail "job $straight did not complete"
echo "   job $straight completed in $((SECONDS - t0)) s"

t0=$SECONDS
job=$(sbatch --parsable "${fit[@]}" "$src/launch/slurm/bert-large-16node.sbatch" "${small[@]}") ||
  fail "sbatch refused bert-large-16node.sbatch"
out=runs/joule-bert-large-p1-$job.out
echo "== job $job: the same, preempted at step $signal_at and requeued"

for _ in $(seq 1 1800); do grep -q "^step $signal_at/" "$out" 2> /dev/null && break; sleep 0.1; done
grep -q "^step $signal_at/" "$out" || fail "job $job did not reach step $signal_at within 180 s"
scancel --signal=USR1 "$job" || fail "scancel --signal=USR1 $job"
echo "   signalled (USR1) at step $signal_at after $((SECONDS - t0)) s"

slurm_wait_job "$job" 600 || fail "job $job did not complete after its requeue"
restarts=$(scontrol show job "$job" | grep -o 'Restarts=[0-9]*' | cut -d= -f2)
echo "   completed $((SECONDS - t0)) s after submission, $restarts requeue(s)"

(( restarts >= 1 )) || fail "job $job was never requeued (Restarts=$restarts)"
grep -q "preempted (signal)" "$out" || fail "no preemption notice in $out"
grep -q "joule was preempted (exit 75): requeueing job $job" "$out" || fail "the script did not requeue on exit 75"
grep -q "resumed from .*step_" "$out" || fail "the requeued job did not resume from a checkpoint"
(( $(grep -c "16 rank(s) on 16 node(s)" "$out") >= 2 )) || fail "both segments must run 16 ranks on 16 nodes"
grep -q "^step $steps/$steps" "$out" || fail "the requeued job did not reach step $steps"
python3 - runs/bert-large-phase1/summary.json $steps <<'PY' || fail "summary.json of job $job"
import json, sys
s = json.load(open(sys.argv[1])); steps = int(sys.argv[2])
print("   summary:", {k: s[k] for k in ("nodes", "ranks", "segments", "sequences", "instance_hours")})
assert (s["nodes"], s["ranks"]) == (16, 16), (s["nodes"], s["ranks"])
assert s["segments"] >= 2 and s["sequences"] == steps * 32, s
PY
cmp runs/straight/final/model.safetensors runs/bert-large-phase1/final/model.safetensors ||
  fail "the preempted and requeued job's final weights differ from the uninterrupted job's"
echo "   final weights byte-identical to the uninterrupted job's"
echo "slurm across $nodes emulated nodes: ok"
