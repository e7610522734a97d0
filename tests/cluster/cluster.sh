#!/usr/bin/env bash
# An emulated cluster on one host: N nodes, each a network namespace and (for every process started on it) a UTS
# namespace with its own hostname, joined by a bridge; each node's link rate-limited with tc tbf. Open MPI starts its
# daemons on the nodes through a launch agent that enters the node's namespaces instead of ssh (plm_rsh_agent), and
# talks TCP between nodes. Everything it makes is named after this shell's PID and removed on exit (trap), failure
# included. Root only; nothing leaves the namespaces it creates (the bridge's address is inside them too).
#
# Source it, then:
#   cluster_up N [RATE]      nodes node1..nodeN on $CLUSTER_NET.0/24 (RATE for tc tbf, default 500mbit); $CLUSTER_DIR
#                            holds the agent and hostfiles. CLUSTER_NET is 10.77.K, the first K that no other run holds
#                            (a lock under /run/joule-cluster, kept until this shell exits) and no interface uses: two
#                            test runs on one machine (two clones, a developer beside CI) never share a subnet or a name
#   cluster_mpirun RANKS_PER_NODE NODES ARGS...   mpirun over the first NODES nodes, RANKS_PER_NODE ranks each
#   cluster_exec K CMD...    runs CMD on node K (its namespaces, hostname nodeK); daemons it starts stay there
#   cluster_rate K RATE      node K's link to RATE from now on (a straggler)
#   cluster_down             (also run on exit)
#   cluster_unavailable      prints why namespaces cannot be made here (not root, no ip/unshare/tc), or nothing
#   cluster_test_begin DIR   a test's start: exits 77 (ctest: skipped) with the reason when namespaces are unavailable,
#                            else waits for the machine's emulated cluster (below), sources tests/support/e2e_setup.sh
#                            (set `joule` first) and works in a fresh DIR
# What the emulated-cluster tests measure (link rates, all-reduce times, a straggler's exposed communication) must not
# depend on what else the machine runs. Two things see to that:
#  - one emulated cluster at a time on the machine: cluster_test_begin takes /run/joule-cluster/machine.lock (held until
#    the test's shell exits), so a second test run's cluster tests wait for this one's instead of sharing its cores;
#  - cluster_mpirun runs the ranks at nice -15: a build or a second test run beside them (nice 0) gets about 1/28 of the
#    CPU the ranks want, so it cannot stretch their progress through a collective.
CLUSTER_PREFIX=jc$$
CLUSTER_NODES=0
CLUSTER_NET=

# This run's own /24: 10.77.K with K the first subnet whose lock this shell can take and that no interface already
# has an address in (a run killed with SIGKILL leaves its bridge behind, and its lock free).
cluster_pick_subnet() {
  local k
  mkdir -p /run/joule-cluster || return 1
  for ((k = 0; k < 250; k++)); do
    exec {CLUSTER_LOCK_FD}> "/run/joule-cluster/subnet-$k.lock" || return 1
    if flock -n "$CLUSTER_LOCK_FD" && ! ip -4 -o addr show | grep -q " 10\.77\.$k\."; then
      CLUSTER_NET=10.77.$k
      return 0
    fi
    exec {CLUSTER_LOCK_FD}>&-
  done
  echo "no free subnet among 10.77.0-249.0/24 (each held by another run or in use)" >&2
  return 1
}

cluster_unavailable() {
  [[ $(id -u) -eq 0 ]] || { echo "not root (network namespaces need root)"; return; }
  local tool
  for tool in ip unshare tc; do command -v $tool > /dev/null || { echo "no '$tool' command"; return; }; done
  ip netns add "${CLUSTER_PREFIX}_probe" 2> /dev/null || { echo "this kernel or container cannot make network namespaces"; return; }
  ip netns del "${CLUSTER_PREFIX}_probe"
}

cluster_test_begin() {
  local why
  why=$(cluster_unavailable)
  if [[ -n "$why" ]]; then echo "SKIPPED: emulated cluster unavailable: $why"; exit 77; fi
  cluster_take_machine || exit 1
  source "$(dirname "${BASH_SOURCE[0]}")/../support/e2e_setup.sh"
  e2e_workdir "$1"
}

# Waits (up to 5 minutes) for any other run's emulated-cluster test to end, then holds the machine until this shell
# exits.
cluster_take_machine() {
  mkdir -p /run/joule-cluster || return 1
  exec {CLUSTER_MACHINE_FD}> /run/joule-cluster/machine.lock || return 1
  flock -n "$CLUSTER_MACHINE_FD" && return 0
  echo "waiting for another test run's emulated cluster (/run/joule-cluster/machine.lock) to finish"
  flock -w 300 "$CLUSTER_MACHINE_FD" && return 0
  echo "FAIL: another test run held the emulated cluster (/run/joule-cluster/machine.lock) for 5 minutes" >&2
  return 1
}

cluster_down() {
  local i
  for ((i = 1; i <= CLUSTER_NODES; i++)); do ip netns del "${CLUSTER_PREFIX}_node$i" 2> /dev/null; done
  ip link del "${CLUSTER_PREFIX}br" 2> /dev/null
  CLUSTER_NODES=0
  return 0
}

cluster_up() {
  local n=$1 rate=${2:-500mbit} i
  CLUSTER_DIR=${CLUSTER_DIR:-$(mktemp -d)}
  trap cluster_down EXIT
  [[ -n "$CLUSTER_NET" ]] || cluster_pick_subnet || return 1
  ip link add "${CLUSTER_PREFIX}br" type bridge || return 1
  ip addr add "$CLUSTER_NET.254/24" dev "${CLUSTER_PREFIX}br" && ip link set "${CLUSTER_PREFIX}br" up || return 1
  for ((i = 1; i <= n; i++)); do
    local ns=${CLUSTER_PREFIX}_node$i
    ip netns add "$ns" || return 1
    CLUSTER_NODES=$i
    ip link add "${CLUSTER_PREFIX}v$i" type veth peer name eth0 netns "$ns" || return 1
    ip link set "${CLUSTER_PREFIX}v$i" master "${CLUSTER_PREFIX}br" up
    ip netns exec "$ns" ip addr add "$CLUSTER_NET.$i/24" dev eth0
    ip netns exec "$ns" ip link set eth0 up
    ip netns exec "$ns" ip link set lo up
    ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 64kb latency 5ms || return 1
  done
  # Open MPI's launch agent: like `ssh HOST COMMAND`, but into the node's namespaces, with the node's hostname.
  cat > "$CLUSTER_DIR/agent.sh" <<AGENT
#!/usr/bin/env bash
host=\$1; shift
exec ip netns exec "${CLUSTER_PREFIX}_\$host" unshare --uts bash -c "hostname \$host; exec \$*"
AGENT
  chmod +x "$CLUSTER_DIR/agent.sh"
}

# nsenter, not `ip netns exec`: the latter also remounts /sys, which hides the host's cgroups from slurmd.
cluster_exec() {
  local k=$1; shift
  nsenter --net="/run/netns/${CLUSTER_PREFIX}_node$k" unshare --uts bash -c 'hostname "$0"; exec "$@"' "node$k" "$@"
}

cluster_rate() {
  ip netns exec "${CLUSTER_PREFIX}_node$1" tc qdisc change dev eth0 root tbf rate "$2" burst 64kb latency 5ms
}

cluster_mpirun() {
  local per_node=$1 nodes=$2 i
  shift 2
  local hosts=$CLUSTER_DIR/hosts_${nodes}x$per_node
  : > "$hosts"
  for ((i = 1; i <= nodes; i++)); do echo "node$i slots=$per_node" >> "$hosts"; done
  nice -n -15 mpirun --allow-run-as-root --oversubscribe --bind-to none --hostfile "$hosts" -np $((nodes * per_node)) --map-by slot \
    --mca plm_rsh_agent "$CLUSTER_DIR/agent.sh" --mca btl tcp,self,vader --mca btl_tcp_if_include "$CLUSTER_NET.0/24" \
    --mca oob_tcp_if_include "$CLUSTER_NET.0/24" "$@"
}
