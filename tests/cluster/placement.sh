#!/usr/bin/env bash
# Placement across emulated nodes: node index, local rank and local size right on every rank at 4 nodes x 2 ranks and
# 16 nodes x 1, from MPI and from the launcher's environment (Collectives.ProcessGroupFactsAcrossNodes).
# usage: placement.sh JOULE_MPI_TESTS     exits 77 (ctest: skipped) with the reason when namespaces are unavailable
set -uo pipefail
tests=$1
source "$(dirname "$0")/cluster.sh"
why=$(cluster_unavailable)
if [[ -n "$why" ]]; then echo "SKIPPED: emulated cluster unavailable: $why"; exit 77; fi
cluster_take_machine || exit 1
cluster_up 16 || { echo "FAIL: could not make the emulated nodes"; exit 1; }
for layout in "4 2" "16 1"; do
  read -r nodes per_node <<< "$layout"
  echo "== $nodes nodes x $per_node rank(s)"
  cluster_mpirun "$per_node" "$nodes" -x OMP_NUM_THREADS=1 -x JOULE_EXPECT_NODES=$nodes -x JOULE_EXPECT_RANKS_PER_NODE=$per_node \
    "$tests" --gtest_filter='Collectives.ProcessGroupFacts*' || { echo "FAIL: placement at $nodes x $per_node"; exit 1; }
done
echo "placement across emulated nodes: ok"
