# The set-up every end-to-end test shares; source it after setting `joule` (the binary) and, for mpi, `mpiexec`:
#   e2e_workdir DIR                      a fresh work directory (removed first), made the current directory
#   mpi ARGS...                          ARGS at 2 ranks on this host: "$mpiexec" "${MPI_ARGS[@]}" ARGS
#                                        (set MPI_EXTRA=(-x VAR ...) before sourcing to add options)
#   fail MESSAGE                         prints FAIL: MESSAGE and exits 1
#   e2e_make_data DOCS SEED VOCAB [FLAGS...]
#                                        corpus.txt (DOCS synthetic documents), vocab.txt (VOCAB tokens) and shards/
#                                        (seq 64, 10 predictions, 2 shards; FLAGS go to `joule data create`)
MPI_ARGS=(-n 2 --oversubscribe --allow-run-as-root --bind-to none -x OMP_NUM_THREADS=1 ${MPI_EXTRA[@]+"${MPI_EXTRA[@]}"})

e2e_workdir() { rm -rf "$1" && mkdir -p "$1" && cd "$1" || exit 1; }

mpi() { "$mpiexec" "${MPI_ARGS[@]}" "$@"; }

fail() { echo "FAIL: $*"; exit 1; }

e2e_make_data() {
  local documents=$1 seed=$2 vocab=$3
  shift 3
  "$joule" data synth --out corpus.txt --documents "$documents" --seed "$seed" >/dev/null || fail "data synth"
  "$joule" data vocab --input corpus.txt --out vocab.txt --size "$vocab" >/dev/null || fail "data vocab"
  "$joule" data create --input corpus.txt --vocab vocab.txt --out shards --seq-len 64 --max-pred 10 --shards 2 "$@" >/dev/null ||
    fail "data create"
}
