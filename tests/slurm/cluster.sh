#!/usr/bin/env bash
# A private one-host Slurm cluster for tests: munged, slurmctld and slurmd from a generated slurm.conf,
# all state, sockets, logs and ports inside CLUSTER_DIR, so it never touches /etc/slurm or a system munge.
# Source it, then:  cluster_start DIR   ...   cluster_stop   (cluster_stop is safe to call twice).
# Needs root (slurmd runs jobs as the submitting user) and Debian's slurm-wlm and munge.

cluster_log() { echo "[slurm-cluster] $*" >&2; }

# Two free TCP ports from the kernel.
cluster_free_ports() {
  python3 - <<'PY'
import socket
socks = [socket.socket() for _ in range(2)]
for s in socks: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in socks))
PY
}

cluster_start() {
  CLUSTER_DIR=$1
  mkdir -p "$CLUSTER_DIR"/{state,spool,log,munge}
  chmod 700 "$CLUSTER_DIR/munge"
  local host cpus mem_mb ports
  host=$(hostname -s)
  cpus=$(nproc)
  mem_mb=$(( $(awk '/MemTotal/ {print $2}' /proc/meminfo) / 1024 / 2 ))
  read -r ctld_port slurmd_port < <(cluster_free_ports)

  dd if=/dev/urandom of="$CLUSTER_DIR/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$CLUSTER_DIR/munge/munge.key"
  MUNGE_SOCKET=$CLUSTER_DIR/munge/munge.socket
  munged --force --socket="$MUNGE_SOCKET" --key-file="$CLUSTER_DIR/munge/munge.key" \
         --pid-file="$CLUSTER_DIR/munge/munged.pid" --seed-file="$CLUSTER_DIR/munge/munged.seed" \
         --log-file="$CLUSTER_DIR/log/munged.log" || { cluster_log "munged did not start"; return 1; }

  export SLURM_CONF=$CLUSTER_DIR/slurm.conf
  cat > "$SLURM_CONF" <<CONF
ClusterName=joule-test
SlurmctldHost=$host
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$MUNGE_SOCKET,cred_expire=10
CredType=cred/munge
# A requeued job waits cred_expire seconds before it may start again (default 120).
StateSaveLocation=$CLUSTER_DIR/state
SlurmdSpoolDir=$CLUSTER_DIR/spool
SlurmctldPidFile=$CLUSTER_DIR/slurmctld.pid
SlurmdPidFile=$CLUSTER_DIR/slurmd.pid
SlurmctldLogFile=$CLUSTER_DIR/log/slurmctld.log
SlurmdLogFile=$CLUSTER_DIR/log/slurmd.log
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
NodeName=$host CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF

  slurmctld -f "$SLURM_CONF" || { cluster_log "slurmctld did not start"; cluster_dump_logs; return 1; }
  slurmd -f "$SLURM_CONF" || { cluster_log "slurmd did not start"; cluster_dump_logs; return 1; }
  local i
  for i in $(seq 1 60); do
    if sinfo -h -o '%T' 2>/dev/null | grep -Eq '^(idle|mixed)'; then
      cluster_log "up: $host, $cpus CPUs, ports $ctld_port/$slurmd_port, conf $SLURM_CONF"
      return 0
    fi
    sleep 0.5
  done
  cluster_log "the node did not become idle within 30 s:"; sinfo -N -l >&2 || true
  cluster_dump_logs
  return 1
}

cluster_dump_logs() {
  local f
  for f in "$CLUSTER_DIR"/log/*.log; do
    [[ -f $f ]] || continue
    echo "----- $f (last 30 lines)" >&2; tail -n 30 "$f" >&2
  done
}

cluster_stop() {
  [[ -n "${CLUSTER_DIR:-}" && -d "$CLUSTER_DIR" ]] || return 0
  local pidfile pid
  # Cancel whatever is left, then stop the daemons: slurmd, slurmctld, munged (reverse of start).
  scancel --quiet --full -u "$(id -un)" 2>/dev/null || true
  local i
  for i in $(seq 1 20); do [[ -z "$(squeue -h 2>/dev/null)" ]] && break; sleep 0.5; done
  for pidfile in slurmd.pid slurmctld.pid munge/munged.pid; do
    pid=$(cat "$CLUSTER_DIR/$pidfile" 2>/dev/null || true)
    [[ -n "$pid" ]] && kill "$pid" 2>/dev/null
  done
  sleep 1
  for pidfile in slurmd.pid slurmctld.pid munge/munged.pid; do
    pid=$(cat "$CLUSTER_DIR/$pidfile" 2>/dev/null || true)
    [[ -n "$pid" ]] && kill -9 "$pid" 2>/dev/null
  done
  cluster_log "stopped"
  CLUSTER_DIR=
}
