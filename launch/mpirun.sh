#!/usr/bin/env bash
# Launch joule with Open MPI on one host or on the hosts of a hostfile, one rank per device or core.
#   launch/mpirun.sh [-n RANKS] [--hostfile FILE] [--ranks-per-node K] -- joule train --config RUN.toml ...
# Prints the exact mpirun command before running it. SIGTERM or SIGUSR1 to this script reaches every rank as SIGUSR1
# (mpirun forwards SIGUSR1; a SIGTERM to mpirun itself aborts the job, and mpirun then returns 1): joule checkpoints,
# every rank exits 75, and so does this script, the code a scheduler requeues on. When a rank has printed a joule
# error, Open MPI's banners that would follow it ("MPI_ABORT was invoked", "Primary job terminated normally, but...",
# "mpirun detected that one or more processes exited with non-zero status") are left out, so the error and its
# "what to do" are the last thing on the screen; mpirun's own errors (no slots, a command not found) still show.
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
# stderr, with Open MPI's banners (blocks between lines of dashes that say a process aborted or exited non-zero) held
# back to the end and dropped if a joule error was seen (they can arrive before the error they follow), and their
# help-aggregation notes dropped with them (and show_help's own unpack error: when ranks abort together, Open MPI 4.1
# can fail to unpack a help message it forwards, "ORTE_ERROR_LOG: Data unpack would read past end of buffer in file
# .../show_help.c"; it belongs to the banners, not to the job).
quiet_after_joule_error() {
  awk '
    /joule [a-z ]+: error: / { error = 1 }
    /^--------------------+$/ {
      if (!inblock) { inblock = 1; block = $0 "\n"; next }
      block = block $0 "\n"; inblock = 0
      if (block ~ /MPI_ABORT was invoked|Primary job +terminated|exited with non-zero status|mpirun noticed that process/) held = held block
      else { printf "%s", block; fflush() }
      next
    }
    inblock { block = block $0 "\n"; next }
    /has sent help message|orte_base_help_aggregate|ORTE_ERROR_LOG: .*show_help\.c/ { notes = notes $0 "\n"; next }
    { print; fflush() }
    END { if (!error) printf "%s%s", held, notes; if (inblock) printf "%s", block }'
}
filter_fifo=$(mktemp -u /tmp/joule-mpirun.XXXXXX)
mkfifo "$filter_fifo"
quiet_after_joule_error < "$filter_fifo" >&2 &
filter=$!
set +e  # mpirun's exit code is this script's
"${args[@]}" "$@" 2> "$filter_fifo" &
launcher=$!
preempt() { kill -USR1 "$launcher" 2>/dev/null || true; }
trap preempt TERM USR1
# `wait` returns early when a trapped signal arrives: wait again until mpirun itself has ended.
while true; do
  wait "$launcher"
  rc=$?
  kill -0 "$launcher" 2>/dev/null || break
done
wait "$filter"  # everything mpirun wrote to stderr has been shown
rm -f "$filter_fifo"
exit "$rc"
