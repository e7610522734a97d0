#!/usr/bin/env bash
# The α-β model (trainer/sim/alpha_beta.h) against measured links: emulated nodes whose links are shaped to RATE
# (tc tbf), one rank per node, Open MPI over TCP with its ring all-reduce forced (the algorithm the model describes).
#  1. α and β of one link from a ping-pong between node 1 and node 2 (`joule bench comm --pingpong`: one-way times
#     of 1 KiB - 16 MiB; β from the slope between 4 and 16 MiB, α from 1 KiB);
#  2. the all-reduce's bus bandwidth at each node count for 4 MiB to MAX_BYTES (x4), measured, and predicted by the
#     ring all-reduce's α-β time from that α and β (`--predict-alpha-us`, `--predict-mbps`);
#  3. a table row per size (VALIDATION.md's "emulated links, one host"), and a failure when a prediction is more than
#     15 % off.
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
# Open MPI's ring all-reduce whatever the message size and rank count. joule's collectives are nonblocking
# (MPI_Iallreduce), which Open MPI runs in coll/libnbc: left to itself, libnbc takes a binomial reduce + broadcast
# below 4 ranks, which moves twice the ring's bytes over each link.
ring=(--mca coll_libnbc_iallreduce_algorithm 1 --mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm 4
      -x OMP_NUM_THREADS=1)

cluster_mpirun 1 2 "${ring[@]}" "$joule" bench comm --pingpong --min-bytes 1024 --max-bytes 1024 --gradient-model none \
  --iterations 7 --json > pingpong.jsonl 2> pingpong.err || { cat pingpong.err; fail "ping-pong"; }
read -r alpha_us mbps < <(python3 -c '
import json
fit = [json.loads(l) for l in open("pingpong.jsonl") if "alpha_s" in l][0]
print(fit["alpha_s"] * 1e6, fit["bytes_per_s"] / 1e6)')
echo "one link at $rate: alpha ${alpha_us} us, bandwidth ${mbps} MB/s (ping-pong fit)"
for n in $counts; do
  cluster_mpirun 1 "$n" "${ring[@]}" "$joule" bench comm --min-bytes 4194304 --max-bytes "$max_bytes" --iterations 5 \
    --gradient-model none --predict-alpha-us "$alpha_us" --predict-mbps "$mbps" --json > "busbw_$n.jsonl" 2> "busbw_$n.err" ||
    { cat "busbw_$n.err"; fail "bench comm on $n nodes"; }
done
python3 - "$rate" "$alpha_us" "$mbps" $counts <<'PY' || fail "the alpha-beta model is more than 15 % off (above)"
import json, sys
rate, alpha_us, mbps, counts = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]
worst = 0.0
print(f"| case | unit | measured | predicted | error | basis |")
print(f"|---|---|---|---|---|---|")
for n in counts:
    for row in (json.loads(l) for l in open(f"busbw_{n}.jsonl")):
        if "bytes" not in row:
            continue
        assert row["ok"], row
        mib = row["bytes"] / 2**20
        measured, predicted = row["best_busbw"] * 1e3, row["predicted_busbw"] * 1e3  # MB/s, the fastest repeat
        error = predicted / measured - 1
        worst = max(worst, abs(error))
        print(f"| all-reduce busbw, ring, {n} emulated nodes, {mib:g} MiB | MB/s | {measured:.2f} | {predicted:.2f} | {100 * error:+.1f} % | "
              f"emulated links, one host: tc tbf {rate}, α {alpha_us:.0f} us and 1/β {mbps:.2f} MB/s from a ping-pong |")
print(f"largest error {100 * worst:.1f} %")
sys.exit(0 if worst <= 0.15 else 1)
PY
