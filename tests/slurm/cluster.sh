#!/usr/bin/env bash
# A private Slurm cluster for tests: munged, slurmctld and slurmd from a generated slurm.conf, all state, sockets,
# logs and ports inside SLURM_TEST_DIR, so it never touches /etc/slurm or a system munge. Two shapes:
#   slurm_start DIR          one node: this host, one slurmd
#   slurm_start DIR N        N emulated nodes (tests/cluster/cluster.sh: call cluster_up N first): slurmd K runs on
#                            nodeK (its network and UTS namespaces, address $CLUSTER_NET.K) with its own NodeName, spool,
#                            pid file and log; slurmctld runs on node1, as on a small cluster's head node
# then   slurm_stop          (safe to call twice)   slurm_dump_logs   (the daemons' last log lines, on failure)
# Needs root (slurmd runs jobs as the submitting user) and Debian's slurm-wlm and munge.

slurm_log() { echo "[slurm-cluster] $*" >&2; }

# Two free TCP ports from the kernel.
slurm_free_ports() {
  python3 - <<'PY'
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

# The slurm.conf lines naming the controller and the nodes: this host, or node1..nodeN of the emulated cluster.
slurm_nodes_conf() {
  local nodes=$1 cpus mem_mb
  cpus=$(nproc)
  mem_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 ))
  if (( nodes == 0 )); then
    echo "SlurmctldHost=$(hostname -s)"
    echo "NodeName=$(hostname -s) CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN"
  else
    # Every emulated node sees the whole host; each offers the host's CPUs and a share of its memory.
    echo "SlurmctldHost=node1($CLUSTER_NET.1)"
    echo "NodeName=node[1-$nodes] NodeAddr=$CLUSTER_NET.[1-$nodes] CPUs=$cpus RealMemory=$(( mem_mb / nodes )) State=UNKNOWN"
  fi
}

# This cluster's own job ids, from a range no other test cluster on the host holds (a lock under /run/joule-cluster,
# kept until this shell exits): Open MPI names its shared-memory segments and session directory after the PMIx
# namespace (slurm.pmix.JOB.STEP), so two test runs at once whose clusters both numbered jobs from 1 had their
# ranks meet in each other's segments (a segfault and a hang, seen with two clones testing together).
slurm_pick_job_ids() {
  local k
  mkdir -p /run/joule-cluster || return 1
  for ((k = 0; k < 600; k++)); do
    exec {SLURM_ID_LOCK_FD}> "/run/joule-cluster/slurm-job-ids-$k.lock" || return 1
    if flock -n "$SLURM_ID_LOCK_FD"; then
      SLURM_FIRST_JOB_ID=$(( (k + 1) * 100000 ))
      return 0
    fi
    exec {SLURM_ID_LOCK_FD}>&-
  done
  slurm_log "no free job id range (600 held by other test clusters)"
  return 1
}

slurm_start() {
  SLURM_TEST_DIR=$1
  SLURM_TEST_NODES=${2:-0}
  slurm_pick_job_ids || return 1
  mkdir -p "$SLURM_TEST_DIR"/{state,spool,log,munge}
  chmod 700 "$SLURM_TEST_DIR/munge"
  local ctld_port slurmd_port
  read -r ctld_port slurmd_port < <(slurm_free_ports)

  dd if=/dev/urandom of="$SLURM_TEST_DIR/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$SLURM_TEST_DIR/munge/munge.key"
  # munged's socket is a file: processes in every network namespace reach it.
  local munge_socket=$SLURM_TEST_DIR/munge/munge.socket
  munged --force --socket="$munge_socket" --key-file="$SLURM_TEST_DIR/munge/munge.key" \
         --pid-file="$SLURM_TEST_DIR/munge/munged.pid" --seed-file="$SLURM_TEST_DIR/munge/munged.seed" \
         --log-file="$SLURM_TEST_DIR/log/munged.log" || { slurm_log "munged did not start"; return 1; }

  export SLURM_CONF=$SLURM_TEST_DIR/slurm.conf
  cat > "$SLURM_CONF" <<CONF
ClusterName=joule-test
FirstJobId=$SLURM_FIRST_JOB_ID
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$munge_socket,cred_expire=10
CredType=cred/munge
# A requeued job waits cred_expire seconds before it may start again (default 120).
StateSaveLocation=$SLURM_TEST_DIR/state
# %n: the node's name, so that every slurmd of an emulated cluster has its own spool, pid file and log.
SlurmdSpoolDir=$SLURM_TEST_DIR/spool/%n
SlurmctldPidFile=$SLURM_TEST_DIR/slurmctld.pid
SlurmdPidFile=$SLURM_TEST_DIR/slurmd-%n.pid
SlurmctldLogFile=$SLURM_TEST_DIR/log/slurmctld.log
SlurmdLogFile=$SLURM_TEST_DIR/log/slurmd-%n.log
# Jobs' temporary files (PMIx's among them) per node, too: two nodes on one host must not share them.
TmpFS=$SLURM_TEST_DIR/tmp/%n
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
JobRequeue=1
ReturnToService=2
SchedulerType=sched/backfill
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MailProg=/bin/true
MinJobAge=600
KillWait=30
$(slurm_nodes_conf "$SLURM_TEST_NODES")
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF

  local i
  local names=($(hostname -s))
  (( SLURM_TEST_NODES == 0 )) || names=($(seq -f 'node%g' 1 "$SLURM_TEST_NODES"))
  for i in "${names[@]}"; do mkdir -p "$SLURM_TEST_DIR/spool/$i" "$SLURM_TEST_DIR/tmp/$i"; done
  if (( SLURM_TEST_NODES == 0 )); then
    slurmctld -f "$SLURM_CONF" || { slurm_log "slurmctld did not start"; slurm_dump_logs; return 1; }
    slurmd -f "$SLURM_CONF" || { slurm_log "slurmd did not start"; slurm_dump_logs; return 1; }
  else
    cluster_exec 1 slurmctld -f "$SLURM_CONF" || { slurm_log "slurmctld did not start on node1"; slurm_dump_logs; return 1; }
    for ((i = 1; i <= SLURM_TEST_NODES; i++)); do
      cluster_exec "$i" slurmd -f "$SLURM_CONF" || { slurm_log "slurmd did not start on node$i"; slurm_dump_logs; return 1; }
    done
  fi
  local want=$(( SLURM_TEST_NODES > 0 ? SLURM_TEST_NODES : 1 ))
  for i in $(seq 1 120); do
    if (( $(sinfo -h -N -o '%T' 2>/dev/null | grep -Ec '^(idle|mixed)$') == want )); then
      slurm_log "up: $want node(s), ports $ctld_port/$slurmd_port, conf $SLURM_CONF"
      return 0
    fi
    sleep 0.5
  done
  slurm_log "not every node became idle within 60 s:"; sinfo -N -l >&2 || true
  slurm_dump_logs
  return 1
}

# Waits for job ID to complete (a requeued job comes back PENDING: keeps waiting), at most LIMIT seconds; returns 1,
# saying how the job ended or that it is still in the queue, otherwise.
slurm_wait_job() {
  local id=$1 limit=$2 t=0 state=
  while (( t < limit )); do
    state=$(scontrol show job "$id" 2> /dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2 || true)
    case "$state" in
      COMPLETED) return 0 ;;
      FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE) echo "job $id ended $state"; return 1 ;;
    esac
    sleep 2; t=$((t + 2))
  done
  echo "job $id still $state after $limit s"; return 1
}

slurm_dump_logs() {
  local f
  for f in "$SLURM_TEST_DIR"/log/*.log; do
    [[ -f $f ]] || continue
    echo "----- $f (last 30 lines)" >&2; tail -n 30 "$f" >&2
  done
}

slurm_stop() {
  [[ -n "${SLURM_TEST_DIR:-}" && -d "$SLURM_TEST_DIR" ]] || return 0
  # Cancel whatever is left, then stop the daemons: slurmds, slurmctld, munged (reverse of start).
  scancel --quiet --full -u "$(id -un)" 2>/dev/null || true
  local i pidfile pid pidfiles
  pidfiles=("$SLURM_TEST_DIR"/slurmd*.pid "$SLURM_TEST_DIR/slurmctld.pid" "$SLURM_TEST_DIR/munge/munged.pid")
  for i in $(seq 1 20); do [[ -z "$(squeue -h 2>/dev/null)" ]] && break; sleep 0.5; done
  for pidfile in "${pidfiles[@]}"; do
    pid=$(cat "$pidfile" 2>/dev/null || true)
    [[ -n "$pid" ]] && kill "$pid" 2>/dev/null
  done
  sleep 1
  for pidfile in "${pidfiles[@]}"; do
    pid=$(cat "$pidfile" 2>/dev/null || true)
    [[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null
  done
  slurm_log "stopped"
  SLURM_TEST_DIR=
}
