#!/usr/bin/env bash
# joule train across emulated nodes (links at 500 Mbit/s): the same global batch on 1 node x 4 ranks and on 4 nodes x
# 1 rank, a ZeRO-1 checkpoint of 2 nodes resumed on 1 node and on 2, then on 4 nodes with one straggler. The summary
# says how many nodes and bills that many instances; energy is counted once per node; the final weights are
# bit-identical. The buckets' all-reduce is joule's own ring (collectives/mpi_communicator.cc), whose order follows the
# ranks, not where they are, so 4 ranks sum in the same order on 1 node and on 4 (the test would catch a launcher or a
# change that does otherwise).
# usage: train.sh JOULE WORKDIR     exits 77 (ctest: skipped) with the reason when namespaces are unavailable
set -uo pipefail
joule=$1 work=$2
here=$(cd "$(dirname "$0")" && pwd)
source "$here/cluster.sh"
cluster_test_begin "$work"
e2e_make_data 200 5 400
cat > run.toml <<'TOML'
[model]
config = "bert-tiny"
[data]
train = "shards/train"
[train]
steps = 6
micro_batch = 4
global_batch = 16
threads = 1
seed = 3
log_every_steps = 2
TOML
cluster_up 4 || fail "could not make the emulated nodes"
cluster_mpirun 4 1 -x OMP_NUM_THREADS=1 "$joule" train --config run.toml --run-dir one_node > one_node.log 2>&1 ||
  { cat one_node.log; fail "training on 1 node x 4 ranks"; }
cluster_mpirun 1 4 -x OMP_NUM_THREADS=1 "$joule" train --config run.toml --run-dir four_nodes > four_nodes.log 2>&1 ||
  { cat four_nodes.log; fail "training on 4 nodes x 1 rank"; }
grep -q "4 rank(s) on 4 node(s)" four_nodes.log || { cat four_nodes.log; fail "joule train did not see 4 nodes"; }
python3 - <<'PY' || fail "the summaries do not account for the nodes"
import json
a, b = (json.load(open(f"{d}/summary.json")) for d in ("one_node", "four_nodes"))
assert (a["nodes"], a["ranks"]) == (1, 4) and (b["nodes"], b["ranks"]) == (4, 4), (a["nodes"], b["nodes"])
for s, n in ((a, 1), (b, 4)):
    hours = s["instance_hours"]
    assert abs(hours - n * s["billed_wall_s"] / 3600) <= 1e-6 * max(1, hours), (n, hours, s["billed_wall_s"])
print("instance-hours: 1 node", round(a["instance_hours"], 6), "| 4 nodes", round(b["instance_hours"], 6))
# Each node's meter (here the host model) counts once: energy per instance-hour is alike on 1 and on 4 nodes. Were the
# 4 nodes counted as one, it would be a quarter.
per_node_hour = [s["energy"]["it_kwh"] / s["instance_hours"] for s in (a, b)]
print("IT energy (kWh): 1 node", a["energy"]["it_kwh"], "| 4 nodes", b["energy"]["it_kwh"], "| source", b["energy"]["source"],
      "| per instance-hour", [round(x, 5) for x in per_node_hour])
assert 0.5 < per_node_hour[1] / per_node_hour[0] < 2, per_node_hour
PY
if cmp -s one_node/final/model.safetensors four_nodes/final/model.safetensors; then
  echo "final weights: bit-identical on 1 x 4 and 4 x 1"
else
  fail "final weights differ between 1 node x 4 ranks and 4 nodes x 1 rank"
fi
# ZeRO-1 across nodes: a zero1 run on 2 nodes x 2 ranks, checkpointed at step 3, resumes from that checkpoint on the
# same 2 x 2 (bit-identical to the uninterrupted run), on 1 node x 2 ranks and on 2 nodes x 1 rank (the same world of
# 2 on either: bit-identical to each other, and the uninterrupted run's to fp32 rounding, the key biases aside: see
# tests/e2e/zero1_resume.sh), dropout on (its masks are keyed by the rows, not the ranks: models/dropout.h). fp32: in
# bf16 another world size's summation order grows to ~1e-3 of a tensor's scale (tests/e2e/zero1_resume.sh); on the BLAS,
# named, since auto times the fp32 libraries at start-up and a resumed process under load may pick the other one.
cp run.toml zero1.toml
printf '[optimizer]\nshard = "zero1"\n[checkpoint]\nevery_steps = 3\n' >> zero1.toml
zero1_run() {  # RANKS_PER_NODE NODES RUN_DIR [ARGS...]
  local per_node=$1 nodes=$2 dir=$3
  shift 3
  cluster_mpirun "$per_node" "$nodes" -x OMP_NUM_THREADS=1 "$joule" train --config zero1.toml --run-dir "$dir" \
    --set train.precision=fp32 --set train.fp32_gemm=blas "$@" \
    > "$dir.log" 2>&1 || { cat "$dir.log"; fail "zero1 $dir"; }
}
zero1_run 2 2 zero1_2x2
zero1_run 2 2 zero1_2x2_again --resume zero1_2x2/checkpoints/step_00000003
zero1_run 2 1 zero1_1x2 --resume zero1_2x2/checkpoints/step_00000003
zero1_run 1 2 zero1_2x1 --resume zero1_2x2/checkpoints/step_00000003
grep -q "2 rank(s) on 2 node(s)" zero1_2x1.log || { cat zero1_2x1.log; fail "the resume did not see 2 nodes"; }
cmp zero1_2x2/final/model.safetensors zero1_2x2_again/final/model.safetensors ||
  fail "a zero1 resume on the same 2 x 2 ranks is not bit-exact"
cmp zero1_1x2/final/model.safetensors zero1_2x1/final/model.safetensors ||
  fail "a zero1 checkpoint resumed by 2 ranks on 1 node and on 2 nodes trained apart"
echo -n "zero1 resumed on 2 ranks against the uninterrupted 4: "
python3 "$here/../e2e/compare_weights.py" zero1_2x2/final/model.safetensors zero1_1x2/final/model.safetensors \
  --rtol 1e-4 --skip attention.self.key.bias || fail "a zero1 checkpoint resumed on 2 ranks is not the uninterrupted run"
# A straggler: node 2's link at a tenth of the others'. The run completes; the all-reduce waits on the slow link, so
# the communication the step could not hide (metrics.jsonl exposed_comm_s) rises. The bound is what the link allows,
# not a ratio to the first run (whose compute, and so its exposed communication, grows when the machine is busy): the
# gradients go in two buckets (collectives/buckets.cc: the last layers' first, up to 1 MiB, the rest, embeddings
# included, when backward ends), and the ring all-reduce moves 2 (n-1)/n of a bucket over every link, node 2's
# included. The second bucket leaves only when backward is done, so each step waits for at least its transfer at
# 50 Mbit/s, however busy the CPU: exposed >= 2 (n-1)/n x (gradient bytes - 1 MiB) / rate. 0.8 of it allows for tc
# tbf's 64 KB burst (at most 64 KB of the >= 1.6 MB a link carries: 4 %) and the microseconds between the bucket's
# launch and the wait.
cluster_rate 2 50mbit || fail "could not slow node 2's link"
cluster_mpirun 1 4 -x OMP_NUM_THREADS=1 "$joule" train --config run.toml --run-dir straggler > straggler.log 2>&1 ||
  { cat straggler.log; fail "training with a straggler"; }
python3 - <<'PY' || fail "a straggler's slow link does not show in exposed communication"
import json, statistics, struct
def exposed(run):
    return statistics.median(json.loads(l)["exposed_comm_s"] for l in open(f"{run}/metrics.jsonl") if '"exposed_comm_s"' in l)
with open("four_nodes/final/model.safetensors", "rb") as f:  # fp32 weights: the gradient's bytes
    header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
gradient_bytes = sum(t["data_offsets"][1] - t["data_offsets"][0] for k, t in header.items() if k != "__metadata__")
nodes, first_bucket, slow_rate = 4, 1 << 20, 50e6 / 8
bound = 0.8 * 2 * (nodes - 1) / nodes * (gradient_bytes - first_bucket) / slow_rate
normal, slow = exposed("four_nodes"), exposed("straggler")
print(f"exposed communication per step (median): links at 500 Mbit/s {normal:.3f} s, node 2 at 50 Mbit/s {slow:.3f} s "
      f"(at least {bound:.3f} s: the second bucket of {gradient_bytes - first_bucket} gradient bytes over 50 Mbit/s)")
assert slow >= bound and slow > normal, (normal, slow, bound)
PY
echo "training across emulated nodes: ok"
