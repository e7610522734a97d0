#!/usr/bin/env bash
# `joule data create` at scale, in CI: a >= 200 MB generated corpus (a directory of files, two gzip-compressed) under
# --memory-budget 512MB stays under the budget (the peak resident memory joule measures of itself); a run killed
# after some shards resumes, keeps them, and ends with the same shards as an uninterrupted run; the shards pass
# `joule data inspect` and train.
# usage: data_create.sh JOULE MPIEXEC WORKDIR
set -uo pipefail
joule=$1 mpiexec=$2 work=$3
source "$(dirname "$0")/../support/e2e_setup.sh"
e2e_workdir "$work"

# 10 files of ~20 MB: one synthetic corpus of 70,000 documents, copied (the memory test needs bytes, not variety).
"$joule" data synth --out c.txt --documents 70000 --seed 7 > /dev/null || fail "data synth"
head -n 40000 c.txt > sample.txt
"$joule" data vocab --input sample.txt --out vocab.txt --size 2000 > /dev/null || fail "data vocab"
mkdir -p corpus
for i in 0 1 2 3 4 5 6 7 8 9; do cp c.txt corpus/part_$i.txt; done
gzip corpus/part_3.txt corpus/part_7.txt
bytes=$(( $(stat -c %s c.txt) * 10 ))
(( bytes >= 200 * 1024 * 1024 )) || fail "the corpus holds $bytes bytes, fewer than 200 MB"

create=(data create --input corpus --vocab vocab.txt --dupe-factor 1 --memory-budget 512MB)

# 1. Bounded memory over the whole corpus.
"$joule" "${create[@]}" --out full > full.log 2>&1 || { cat full.log; fail "data create over the corpus"; }
cat full.log
peak=$(sed -n 's/.*peak memory \([0-9]*\) MB.*/\1/p' full.log)
[[ -n "$peak" ]] || fail "data create did not report its peak memory"
(( peak <= 512 )) || fail "peak memory $peak MB is over --memory-budget 512MB"
chunks=$(python3 -c "import json; print(len(json.load(open('full/metadata.json'))['chunks']))")
(( chunks >= 4 )) || fail "expected several chunks under a 512 MB budget, found $chunks"

# 2. Killed once its third shard is complete, then resumed with the same arguments: the same shards.
"$joule" "${create[@]}" --out resumed > killed.log 2>&1 &
pid=$!
for _ in $(seq 600); do
  [[ -f resumed.partial/train/part_00002.hdf5 ]] && break
  sleep 0.1
done
kill -9 $pid 2>/dev/null
wait $pid 2>/dev/null
[[ -d resumed.partial && ! -e resumed ]] || fail "a killed data create must leave only resumed.partial"
"$joule" "${create[@]}" --out resumed > resumed.log 2>&1 || { cat resumed.log; fail "the resumed data create"; }
grep -q "resumed: kept [1-9][0-9]* verified shard" resumed.log || { cat resumed.log; fail "the rerun did not keep the complete shards"; }
python3 - <<'PY' || fail "the resumed data set differs from the uninterrupted one"
import json
a, b = (json.load(open(f"{d}/metadata.json")) for d in ("full", "resumed"))
strip = lambda m: [{k: c[k] for k in ("train", "documents", "masked_predictions")} for c in m["chunks"]]
assert strip(a) == strip(b), "shard records differ"
print(f"resumed: {len(b['chunks'])} shards, checksums equal to the uninterrupted run")
PY

# 3. The shards are accepted by inspect and by training.
"$joule" data inspect full/train --samples 1 > inspect.log 2>&1 || { cat inspect.log; fail "data inspect"; }
cat > run.toml <<'TOML'
[model]
config = "bert-tiny"
[data]
train = "full/train"
[train]
steps = 2
micro_batch = 4
threads = 1
TOML
mpi "$joule" train --config run.toml --run-dir run > train.log 2>&1 || { cat train.log; fail "training on the created shards"; }
echo "data create at scale: ok (peak $peak MB under 512 MB, $chunks chunks)"
