#!/usr/bin/env bash
# Launch joule with Open MPI on one host or on the hosts of a hostfile, one rank per device or core.
#   launch/mpirun.sh [-n RANKS] [--hostfile FILE] [--ranks-per-node K] -- joule train --config RUN.toml ...
# Prints the exact mpirun command before running it. SIGTERM or SIGUSR1 to this script reaches every rank as SIGUSR1
# (mpirun forwards SIGUSR1; a SIGTERM to mpirun itself aborts the job, and mpirun then returns 1): joule checkpoints,
# every rank exits 75, and so does this script, the code a scheduler requeues on.
set -euo pipefail
ranks=2 hostfile="" per_node=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    -n|--ranks) ranks=$2; shift 2 ;;
    --hostfile) hostfile=$2; shift 2 ;;
    --ranks-per-node) per_node=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,4p' "$0"; exit 0 ;;
    *) echo "launch/mpirun.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ $# -gt 0 ]] || { echo "launch/mpirun.sh: give the command after --, e.g. -- joule train --config configs/demo-tiny.toml" >&2; exit 2; }
args=(mpirun -np "$ranks" --bind-to none)
[[ -n "$hostfile" ]] && args+=(--hostfile "$hostfile")
[[ -n "$per_node" ]] && args+=(--map-by "ppr:${per_node}:node")
[[ -z "$hostfile" && "$ranks" -gt "$(nproc)" ]] && args+=(--oversubscribe)
[[ $(id -u) -eq 0 ]] && args+=(--allow-run-as-root)
# Forward what the ranks need to find libraries and behave alike on every host.
for v in LD_LIBRARY_PATH PATH OMP_WAIT_POLICY OPENBLAS_THREAD_TIMEOUT JOULE_CONFIG_DIR NCCL_DEBUG; do
  [[ -n "${!v:-}" ]] && args+=(-x "$v")
done
echo "+ ${args[*]} $*" >&2
set +e  # mpirun's exit code is this script's
"${args[@]}" "$@" &
launcher=$!
preempt() { kill -USR1 "$launcher" 2>/dev/null || true; }
trap preempt TERM USR1
# `wait` returns early when a trapped signal arrives: wait again until mpirun itself has ended.
while true; do
  wait "$launcher"
  rc=$?
  kill -0 "$launcher" 2>/dev/null || break
done
exit "$rc"
