#!/usr/bin/env bash
# The α-β model (trainer/sim/alpha_beta.h) against measured links: emulated nodes whose links are shaped to RATE
# (tc tbf), one rank per node, Open MPI over TCP, the all-reduce a ring (the algorithm the model describes).
#  1. α and β of one link from a ping-pong between node 1 and node 2 (`joule bench comm --pingpong`: one-way times
#     of 1 KiB - 16 MiB; β from the slope between 4 and 16 MiB, α from 1 KiB);
#  2. the all-reduce's bus bandwidth at each node count for 4 MiB to MAX_BYTES (x4), measured, and predicted by the
#     ring all-reduce's α-β time from that α and β (`--predict-alpha-us`, `--predict-mbps`);
#  3. a table row per size (VALIDATION.md's "emulated links, one host"), and a failure when a prediction is more than
#     15 % off in 3 attempts (below).
# Load on the machine cannot fail the comparison: the ranks run at nice -15 and no other run's emulated cluster runs
# beside them (tests/cluster/cluster.sh), and both sides use the fastest of their repeats (ping-pong fit and all-reduce
# alike), since the machine's other work can only add time, never remove it. (Before the priority and the lock, two
# full test runs at once measured 23 % slow at 4 nodes, and a loaded host once gave a ping-pong α of 1.3 ms against 9 us.)
# Why 15 %: what the α-β ring model leaves out, bounded at the smallest case (4 MiB over 4 nodes: 1 MiB a ring step):
#  - tc tbf's 64 KB burst lets the first 64 KB of each step through at line rate: measured faster by <= 64 KiB / 1 MiB
#    = 6.25 %;
#  - the ring sends and receives on every link at once, the ping-pong one way at a time: the reverse direction's TCP
#    acknowledgements share the shaped link (about 40 bytes per two 1448-byte segments: 1.4 %);
#  - α: 2(n-1) latencies of <= 0.1 ms against >= 250 ms of transfer at 200 Mbit/s (<= 0.3 %), and the reduction's
#    adds and copies on the CPU (1 MiB a step at > 1 GB/s against 40 ms on the wire: <= 2.5 %);
# about 10.5 % in all; the rest of 15 % is the 4 ranks' own sharing of 2 cores (each ring step waits for the slowest
# rank's turn on a core).
# usage: alpha_beta.sh JOULE WORKDIR [NODE_COUNTS="2 4"] [MAX_BYTES=16777216] [RATE=200mbit]
#        exits 77 (ctest: skipped) with the reason when namespaces are unavailable
set -uo pipefail
joule=$1 work=$2 counts=${3:-"2 4"} max_bytes=${4:-16777216} rate=${5:-200mbit}
here=$(cd "$(dirname "$0")" && pwd)
source "$here/cluster.sh"
cluster_test_begin "$work"
largest=0
for n in $counts; do (( n > largest )) && largest=$n; done
(( largest >= 2 )) || fail "node counts '$counts': at least one must be 2 or more"
cluster_up "$largest" "$rate" || fail "could not make $largest emulated nodes"
# From 1 MiB (every size measured here) joule's all-reduce is its own ring (collectives/mpi_communicator.cc). Below
# it, MPI_Iallreduce: these flags make that Open MPI's ring too, whatever the message size and rank count (left to
# itself, libnbc takes a binomial reduce + broadcast below 4 ranks, which moves twice the ring's bytes over each link).
ring=(--mca coll_libnbc_iallreduce_algorithm 1 --mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 4
      -x OMP_NUM_THREADS=1)

cluster_mpirun 1 2 "${ring[@]}" "$joule" bench comm --pingpong --min-bytes 1024 --max-bytes 1024 --gradient-model none \
  --iterations 7 --json > pingpong.jsonl 2> pingpong.err || { cat pingpong.err; fail "ping-pong"; }
read -r alpha_us mbps < <(python3 -c '
import json
fit = [json.loads(l) for l in open("pingpong.jsonl") if "alpha_s" in l][0]
print(fit["alpha_s"] * 1e6, fit["bytes_per_s"] / 1e6)')
echo "one link at $rate: alpha ${alpha_us} us, bandwidth ${mbps} MB/s (ping-pong fit)"
# The host's CPU time stolen by its hypervisor (/proc/stat's steal column) over a measurement, in % of the wall time
# of all its CPUs: the ranks' nice cannot win that time back, and the kernel's side of the links (veths, the bridge,
# tbf) runs on the same CPUs, so a VM whose neighbours take its cores measures the emulation, not the model.
steal_ticks() { awk '/^cpu /{print $9}' /proc/stat; }
cpus=$(getconf _NPROCESSORS_ONLN) ticks=$(getconf CLK_TCK)
measure() {  # measure N ATTEMPT: the all-reduce at N nodes into busbw_N_ATTEMPT.jsonl, with the steal over it
  local n=$1 attempt=$2 s0 t0 s1 t1
  s0=$(steal_ticks) t0=$(date +%s.%N)
  cluster_mpirun 1 "$n" "${ring[@]}" "$joule" bench comm --min-bytes 4194304 --max-bytes "$max_bytes" --iterations 5 \
    --gradient-model none --predict-alpha-us "$alpha_us" --predict-mbps "$mbps" --json > "busbw_${n}_$attempt.jsonl" \
    2> "busbw_${n}_$attempt.err" || { cat "busbw_${n}_$attempt.err"; fail "bench comm on $n nodes"; }
  s1=$(steal_ticks) t1=$(date +%s.%N)
  awk -v n="$n" -v a="$attempt" -v s="$((s1 - s0))" -v hz="$ticks" -v c="$cpus" -v t0="$t0" -v t1="$t1" \
    'BEGIN { printf "%d nodes, attempt %d: %.1f %% of the CPU time stolen by the hypervisor\n", n, a, 100 * s / hz / ((t1 - t0) * c) }'
}
# Up to 3 attempts: a node count whose prediction is more than 15 % off is measured again, and every size keeps the
# fastest repeat of all its attempts (as within one attempt: other work can only add time). A model that is off
# stays off in every attempt; a host whose CPUs were taken for a while (CI once measured 4 nodes at 0.65x the model's
# bandwidth, while 11 runs on the same host kind came within 11 %) gets another look.
check() {  # check COUNT...: the table from every attempt so far; the node counts still more than 15 % off into failing.txt
  python3 - "$rate" "$alpha_us" "$mbps" "$@" <<'PY'
import glob, json, sys
rate, alpha_us, mbps, counts = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]
worst, failing = 0.0, []
print("| case | unit | measured | predicted | error | basis |")
print("|---|---|---|---|---|---|")
for n in counts:
    best = {}  # bytes -> the row with the fastest repeat over all attempts
    for path in sorted(glob.glob(f"busbw_{n}_*.jsonl")):
        for row in (json.loads(l) for l in open(path)):
            if "bytes" not in row:
                continue
            assert row["ok"], row
            if row["bytes"] not in best or row["best_busbw"] > best[row["bytes"]]["best_busbw"]:
                best[row["bytes"]] = row
    assert best, f"no all-reduce rows for {n} nodes"
    count_worst = 0.0
    for size, row in sorted(best.items()):
        measured, predicted = row["best_busbw"] * 1e3, row["predicted_busbw"] * 1e3  # MB/s, the fastest repeat
        error = predicted / measured - 1
        count_worst = max(count_worst, abs(error))
        print(f"| all-reduce busbw, ring, {n} emulated nodes, {size / 2**20:g} MiB | MB/s | {measured:.2f} | {predicted:.2f} | "
              f"{100 * error:+.1f} % | emulated links, one host: tc tbf {rate}, α {alpha_us:.0f} us and 1/β {mbps:.2f} MB/s "
              f"from a ping-pong |")
    worst = max(worst, count_worst)
    if count_worst > 0.15:
        failing.append(n)
print(f"largest error {100 * worst:.1f} %")
open("failing.txt", "w").write(" ".join(failing))
PY
}
todo=$counts
for attempt in 1 2 3; do
  for n in $todo; do measure "$n" "$attempt"; done
  check $counts || fail "could not compare the measurements with the model"
  todo=$(< failing.txt)
  [[ -z "$todo" ]] && exit 0
  echo "attempt $attempt: more than 15 % off at $todo node(s)"
done
fail "the alpha-beta model is more than 15 % off at $todo node(s) in 3 attempts (above)"
