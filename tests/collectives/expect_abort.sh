#!/usr/bin/env bash
# expect_abort.sh MPIEXEC PROBE: a stalled rank must make the whole job exit non-zero within the
# bound, with the timeout message naming the operation and rank.
set -u
mpiexec=$1 probe=$2 bound=30
start=$(date +%s)
output=$(timeout 90 "$mpiexec" -n 2 --oversubscribe --allow-run-as-root --bind-to none "$probe" 2>&1)
rc=$?
elapsed=$(( $(date +%s) - start ))
echo "$output"
echo "exit code $rc after ${elapsed}s"
fail() { echo "FAIL: $*"; exit 1; }
[[ $rc -ne 0 ]] || fail "the job exited 0"
[[ $rc -ne 124 ]] || fail "the job hung until timeout(1) killed it"
(( elapsed <= bound )) || fail "the job took ${elapsed}s to end (bound ${bound}s)"
grep -q "\[rank 0\] all_reduce 'gradient bucket 0 of 1' of 4096 bytes did not finish within 2 s" <<<"$output" || fail "no timeout message naming operation and rank"
grep -q "aborting the job" <<<"$output" || fail "no abort notice"
echo "PASS"
