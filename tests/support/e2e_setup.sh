# The set-up every end-to-end test shares; source it after setting `joule` (the binary) and, for mpi, `mpiexec`:
#   e2e_workdir DIR                      a fresh work directory (removed first), made the current directory
#   mpi ARGS...                          ARGS at 2 ranks on this host: "$mpiexec" "${MPI_ARGS[@]}" ARGS
#                                        (set MPI_EXTRA=(-x VAR ...) before sourcing to add options)
#   fail MESSAGE                         prints FAIL: MESSAGE and exits 1
#   e2e_snapshot FILE                    every file's checksum, every directory, link and special file below . to FILE
#   e2e_check_refusal NAME LOG RC SECONDS ERRORS EXPECT BEFORE AFTER
#                                        the checks of a refusal case (below)
#   e2e_refusal_table LIMIT MODE COMMAND...
#                                        runs every entry of the array `cases` ("name|arguments|expected error") as
#                                        COMMAND... arguments, within LIMIT seconds, and checks it with
#                                        e2e_check_refusal; MODE literal: the expected texts are literal, else extended
#                                        regular expressions. Sets e2e_cases to the number of cases.
#   e2e_own_pids PATTERN                 the processes matching PATTERN (pgrep -f) whose working directory is this
#                                        test's (the current one): never those of another test run on the machine
#   e2e_rank_pid PATTERN RANK            among those, the process of MPI rank RANK, found by its launcher's
#                                        environment (never mpirun itself, which has no rank); empty if none
#   e2e_make_data DOCS SEED VOCAB [FLAGS...]
#                                        corpus.txt (DOCS synthetic documents), vocab.txt (VOCAB tokens) and shards/
#                                        (seq 64, 10 predictions, 2 shards; FLAGS go to `joule data create`)
#   e2e_make_classifiers                 after e2e_make_data: seq/ (a bert-tiny sequence classifier, labels neg, neutral,
#                                        pos) with texts.jsonl (30 corpus lines, ids doc-N, every third with a
#                                        text_pair), and layout/ (a LayoutLM token classifier, 3 labels) with forms.jsonl
#                                        (10 forms: words, pixel boxes, the page)
#   e2e_serve NAME ARGS...               `joule serve --port 0 ARGS` in the background, its output in NAME.log; sets $url
#                                        and $pid once it serves; every server started so is killed when the test exits
MPI_ARGS=(-n 2 --oversubscribe --allow-run-as-root --bind-to none -x OMP_NUM_THREADS=1 ${MPI_EXTRA[@]+"${MPI_EXTRA[@]}"})

e2e_workdir() { rm -rf "$1" && mkdir -p "$1" && cd "$1" || exit 1; }

mpi() { "$mpiexec" "${MPI_ARGS[@]}" "$@"; }

fail() { echo "FAIL: $*"; exit 1; }

e2e_own_pids() {
  local pid
  for pid in $(pgrep -f -- "$1" || true); do
    [[ $(readlink "/proc/$pid/cwd" 2>/dev/null) == "$PWD" ]] && echo "$pid"
  done
  return 0
}

e2e_rank_pid() {
  local pid found=""
  for pid in $(e2e_own_pids "$1"); do
    tr '\0' '\n' < /proc/$pid/environ 2>/dev/null | grep -qx "OMPI_COMM_WORLD_RANK=$2" && found=$pid
  done
  echo "$found"
}

e2e_make_data() {
  local documents=$1 seed=$2 vocab=$3
  shift 3
  "$joule" data synth --out corpus.txt --documents "$documents" --seed "$seed" >/dev/null || fail "data synth"
  "$joule" data vocab --input corpus.txt --out vocab.txt --size "$vocab" >/dev/null || fail "data vocab"
  "$joule" data create --input corpus.txt --vocab vocab.txt --out shards --seq-len 64 --max-pred 10 --shards 2 "$@" >/dev/null ||
    fail "data create"
}

e2e_make_classifiers() {
  "$joule" model init --config bert-tiny --architecture BertForSequenceClassification --labels 3 --seed 2 --out seq \
    > /dev/null || fail "model init"
  cp vocab.txt seq/
  python3 - <<'PY' || fail "the classifiers' inputs"
import json
c = json.load(open("seq/config.json"))
c["id2label"] = {"0": "neg", "1": "neutral", "2": "pos"}
c["label2id"] = {v: int(k) for k, v in c["id2label"].items()}
json.dump(c, open("seq/config.json", "w"), indent=1)
lines = [l.strip() for l in open("corpus.txt") if l.strip()][:30]
with open("texts.jsonl", "w") as f:
    for i, l in enumerate(lines):
        row = {"text": l, "id": f"doc-{i}"}
        if i % 3 == 0:
            row["text_pair"] = lines[(i + 1) % len(lines)]
        f.write(json.dumps(row) + "\n")
for k in ("id2label", "label2id", "architectures"):
    c.pop(k)
c.update(model_type="layoutlm", max_2d_position_embeddings=1024)
json.dump(c, open("layout.json", "w"))
words = [l.split()[:12] for l in open("corpus.txt") if len(l.split()) >= 3][:10]
with open("forms.jsonl", "w") as f:
    for i, ws in enumerate(words):
        boxes = [[40 * k, 30 + 20 * i, 40 * k + 35, 45 + 20 * i] for k in range(len(ws))]
        f.write(json.dumps({"words": ws, "boxes": boxes, "page": [612, 792], "id": i}) + "\n")
PY
  "$joule" model init --config layout.json --architecture LayoutLMForTokenClassification --labels 3 --out layout \
    > /dev/null || fail "model init layoutlm"
  cp vocab.txt layout/
}

e2e_snapshot() {
  (find . -type f -print0 | sort -z | xargs -0 -r b2sum
   find . -type d | sort
   find . -type l -printf '%p -> %l\n' | sort
   find . ! -type f ! -type d ! -type l -printf '%p %y\n' | sort) > "$1"
}

# The checks every refusal case makes (bad_inputs.sh, hostile.sh): NAME's command exited RC after SECONDS with its
# output in LOG, and ERRORS are its distinct joule error lines. Fails unless it exited non-zero, neither hung (124) nor
# died of a signal (>= 128), took at most 60 s, printed exactly one distinct error matching EXPECT (an extended regular
# expression) and a "what to do" line, printed no library's raw text (a LibTorch backtrace, nlohmann's or toml11's or
# libstdc++'s wording), and changed no file (BEFORE and AFTER are e2e_snapshot files).
e2e_refusal_table() {
  local limit=$1 mode=$2 n=0 c name args expect log rc start elapsed errors
  shift 2
  # Each case's "before" is the previous case's "after": the check holds those equal, and nothing runs between them.
  e2e_snapshot ../logs/after0
  for c in "${cases[@]}"; do
    IFS='|' read -r name args expect <<<"$c"
    n=$((n + 1))
    log=../logs/case$n.log
    mv ../logs/after$((n - 1)) ../logs/before$n
    start=$(date +%s)
    # shellcheck disable=SC2086
    timeout "$limit" "$@" $args > $log 2>&1 < /dev/null
    rc=$? elapsed=$(( $(date +%s) - start ))
    e2e_snapshot ../logs/after$n
    errors=$(grep -o 'joule [a-z ]*: error: .*' $log | sort -u)
    printf '%-52s exit %3d after %2ds: %s\n' "$name" $rc $elapsed "$(head -c 140 <<<"$errors")"
    [[ $mode == literal ]] && expect=$(sed 's/[][()]/\\&/g' <<<"$expect")
    e2e_check_refusal "$name" $log $rc $elapsed "$errors" "$expect" ../logs/before$n ../logs/after$n
  done
  e2e_cases=$n
}

e2e_check_refusal() {
  local name=$1 log=$2 rc=$3 seconds=$4 errors=$5 expect=$6 before=$7 after=$8
  [[ $rc -ne 0 ]] || { cat "$log"; fail "$name: exit code 0"; }
  [[ $rc -ne 124 ]] || { cat "$log"; fail "$name: still running at the time limit (a hang, or a rank left waiting)"; }
  (( rc < 128 )) || { cat "$log"; fail "$name: killed by signal $((rc - 128)) (a crash)"; }
  (( seconds <= 60 )) || fail "$name: took ${seconds}s"
  [[ $(grep -c . <<<"$errors") -eq 1 ]] || { cat "$log"; fail "$name: expected one error message, got: $errors"; }
  grep -Eq -- "$expect" <<<"$errors" || { cat "$log"; fail "$name: the error does not say '$expect'"; }
  grep -q "what to do: " "$log" || { cat "$log"; fail "$name: no 'what to do' line"; }
  ! grep -Eq 'Exception raised from|frame #[0-9]|\[json\.exception|basic_filebuf|filesystem error:|toml::|\[error\]' "$log" ||
    { cat "$log"; fail "$name: a library's raw text reached the user"; }
  diff "$before" "$after" > /dev/null || { diff "$before" "$after"; fail "$name: files changed"; }
}

e2e_servers=()
e2e_serve() {
  local name=$1
  shift
  [[ ${#e2e_servers[@]} -gt 0 ]] || trap 'for p in "${e2e_servers[@]}"; do kill -KILL "$p" 2> /dev/null || true; done' EXIT
  "$joule" serve --port 0 "$@" > "$name.log" 2>&1 &
  pid=$!
  e2e_servers+=("$pid")
  for _ in $(seq 1 900); do
    url=$(grep -o 'http://127.0.0.1:[0-9]*' "$name.log" | head -n 1 || true)
    [[ -n $url ]] && return 0
    kill -0 "$pid" 2> /dev/null || { cat "$name.log"; fail "$name: joule serve exited before serving"; }
    sleep 0.1
  done
  fail "$name: no start line in 90 s"
}
