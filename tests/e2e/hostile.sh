#!/usr/bin/env bash
# Hostile inputs across every command (the classes tests/e2e/README.md lists). Each case in the table must
# exit non-zero without a signal (no crash: exit < 128) within 60 s, print one joule error that names the file, flag,
# key or value, and a "what to do" line, and leave every file in the work directory as it was (nothing written,
# nothing replaced, no OUT.partial or temporary left). Then the cases whose right answer is not an error: a fault
# variable ignored by the release binary, eval figures that do not depend on --batch, a torn metrics.jsonl.
# usage: hostile.sh JOULE WORKDIR
set -uo pipefail
joule=$1 work=$2
source "$(dirname "$0")/../support/e2e_setup.sh"
e2e_workdir "$work/files"
mkdir -p ../logs

e2e_make_data 120 3 300 --eval-documents 20
printf '[model]\nconfig = "bert-tiny"\n[data]\ntrain = "shards/train"\n[train]\nsteps = 4\nmicro_batch = 4\nthreads = 1\n[checkpoint]\nevery_steps = 2\n' > run.toml
"$joule" train --config run.toml --run-dir run > ../logs/run.log 2>&1 || { cat ../logs/run.log; fail "the good run failed"; }
ck=run/checkpoints/step_00000004
[[ -f $ck/COMPLETE ]] || fail "no checkpoint at step 4"
"$joule" export --checkpoint $ck --out model > /dev/null 2>&1 || fail "export of a good checkpoint"
mkfifo fifo
mkdir -p a_dir
echo "kept" > target.txt && ln -s target.txt link.txt
# Damaged copies of the step-4 checkpoint.
damaged() {
  local name=$1
  shift
  mkdir -p damaged && cp -r $ck damaged/$name && (cd damaged/$name && eval "$@")
}
damaged corrupt 'printf "\x7f" | dd of=model.safetensors bs=1 seek=3000 conv=notrunc status=none'
damaged incomplete 'rm COMPLETE'
damaged climbs 'sed -i "s|\"model.safetensors\"|\"../../shards/train/part_00000.hdf5\"|" manifest.json'
damaged absolute "sed -i \"s|\\\"model.safetensors\\\"|\\\"$PWD/corpus.txt\\\"|\" manifest.json"
damaged unlisted 'sed -i "0,/\"optimizer.safetensors\"/s||\"optimizer.bak\"|" manifest.json && cp optimizer.safetensors optimizer.bak'
cp -r run run_climbs && rm -rf run_climbs/checkpoints/step_00000002 && cp -r damaged/climbs/. run_climbs/checkpoints/step_00000004/
# Shard directories with a shard that cannot be read.
mkdir -p dangling && cp shards/train/part_00000.hdf5 dangling/ && ln -s gone.hdf5 dangling/part_00001.hdf5
mkdir -p not_a_file && cp shards/train/part_00000.hdf5 not_a_file/ && mkdir not_a_file/part_00001.hdf5

# Finished data sets changed after they were made: a shard edited in place (same size), a metadata entry leading out.
create_args="--input corpus.txt --vocab vocab.txt --seq-len 64 --max-pred 10 --shards 2 --eval-documents 20"
cp -r shards edited && printf '\x01' | dd of=edited/train/part_00001.hdf5 bs=1 seek=5000 conv=notrunc status=none
cp -r shards meta_out && sed -i 's|"train/part_00000.hdf5"|"../shards/train/part_00000.hdf5"|' meta_out/metadata.json
grep -q '"../shards/train/part_00000.hdf5"' meta_out/metadata.json || fail "could not edit meta_out/metadata.json"

# The data a run trains on is the data it started with: a run on shards without metadata.json (plain/), the same shards
# with one replaced by another of the same shape (plain_edit/) and with one more (plain_more/); a vocabulary a word
# longer; a second data set made from the same text with another seed (again/).
mkdir -p plain && cp shards/train/part_0000*.hdf5 plain/
"$joule" train --config run.toml --run-dir run_plain --data plain --set train.steps=2 > ../logs/run_plain.log 2>&1 ||
  { cat ../logs/run_plain.log; fail "the run on plain/ failed"; }
cp -r plain plain_edit && cp shards/eval/part_00000.hdf5 plain_edit/part_00001.hdf5
cp -r plain plain_more && cp shards/eval/part_00000.hdf5 plain_more/part_00002.hdf5
cp vocab.txt other_vocab.txt && echo "zzzextra" >> other_vocab.txt
# shellcheck disable=SC2086
"$joule" data create $create_args --out again --seed 5 > /dev/null 2>&1 || fail "data create of again/"
# Inputs whose errors once came from a library's own text: a model shorter than the shards' sequences, a summary.json
# that is a directory, an empty model config, a TOML syntax error; a finished run without checkpoints.
python3 -c "import json; c = json.load(open('$(dirname "$0")/../../configs/models/bert-tiny.json')); c['max_position_embeddings'] = 32; json.dump(c, open('cfg32.json', 'w'))"
"$joule" model init --config cfg32.json --out mp32 > /dev/null || fail "model init of mp32"
mkdir -p dirsum/summary.json && : > empty.json && printf '[train\nsteps = 2\n' > bad_syntax.toml
cp -r run_plain finished && rm -rf finished/checkpoints
for d in plain_edit plain_more again/eval shards/eval; do  # their index caches, which any command opening them writes
  "$joule" eval --model model --data $d --max-batches 1 > /dev/null 2>&1 || fail "eval of $d"
done
# The sweep's last findings: a model config key past any BERT, a data set made without eval/, a model directory with
# weights joule does not read, a model trained with another vocabulary, an --out that is a symbolic link, an input
# without text.
python3 -c "import json; c = json.load(open('$(dirname "$0")/../../configs/models/bert-tiny.json')); c['max_position_embeddings'] = 10**11; json.dump(c, open('cfg_huge.json', 'w'))"
"$joule" data create --input corpus.txt --vocab vocab.txt --seq-len 64 --max-pred 10 --out noeval > /dev/null 2>&1 || fail "data create of noeval/"
"$joule" model init --config bert-tiny --out model_30522 > /dev/null || fail "model init of model_30522"
mkdir -p binw cfgonly && cp model/config.json binw/ && : > binw/pytorch_model.bin && cp model/config.json cfgonly/
ln -s a_dir lnk_out && : > empty_in.txt

# name | arguments after `joule` | text the error must contain (a regular expression)
cases=(
  "range: eval --batch 0 (was SIGFPE)|eval --model model --data shards/eval --batch 0|--batch 0: outside the valid range \(valid: \[1, 1048576\]\)"
  "range: eval --batch -1 (was exit 0, loss 0)|eval --model model --data shards/eval --batch -1|--batch -1: outside the valid range"
  "range: eval --max-batches 1.5|eval --model model --data shards/eval --max-batches 1.5|--max-batches 1.5: not a whole number"
  "range: train.threads=100000 (was a hang)|train --config run.toml --run-dir r --set train.threads=100000|train.threads = 100000 is outside \[0, 4096\]"
  "range: train.micro_batch beyond 2^20|train --config run.toml --run-dir r --set train.micro_batch=99999999999|train.micro_batch = 99999999999 is outside \[1, 1048576\]"
  "range: --set an integer that wraps|train --config run.toml --run-dir r --set train.steps=99999999999999999999|--set train.steps: '99999999999999999999' is not an integer"
  "range: plan --nodes 1e9 (was a negative device count)|plan --nodes 1e9|--nodes 1e9: outside the valid range \(valid: \[1, 65536\]\)"
  "range: plan --nodes 5000000000 (cxxopts wrapped it)|plan --nodes 5000000000|--nodes 5000000000: outside the valid range"
  "range: plan global batch < devices|plan --global-batch 64 --nodes 16 --instance trn1.32xlarge|the global batch of 64 sequences is smaller than the [0-9]+ devices of [0-9]+ x trn1.32xlarge"
  "range: plan --sequences inf|plan --sequences inf|--sequences inf: not a finite number"
  "range: plan --max-predictions > --seq-len|plan --max-predictions 200 --seq-len 128|--max-predictions 200 is more than --seq-len 128"
  "range: plan --scaling with a word|plan --scaling 1,two,4|--scaling: node count two: not an integer"
  "range: plan --grid-intensity -5|plan --grid-intensity -5|--grid-intensity -5: outside the valid range \(valid: \[0, 5000\]"
  "range: report --nodes 0|report run --nodes 0|joule report: error: --nodes 0: outside the valid range"
  "range: data create --memory-budget 1e30|data create --input corpus.txt --vocab vocab.txt --out o --memory-budget 1e30GB|--memory-budget \"1e30GB\": expected a size"
  "range: data create --memory-budget 2PB|data create --input corpus.txt --vocab vocab.txt --out o --memory-budget 2048TB|--memory-budget \"2048TB\": more than 1 PiB"
  "range: data create --masked-lm-prob 2|data create --input corpus.txt --vocab vocab.txt --out o --masked-lm-prob 2|--masked-lm-prob 2: outside the valid range \(valid: \(0, 1\]\)"
  "range: data create --max-pred > --seq-len|data create --input corpus.txt --vocab vocab.txt --out o --seq-len 16 --max-pred 20|--max-pred 20 is more than --seq-len 16"
  "range: data create --threads 100000|data create --input corpus.txt --vocab vocab.txt --out o --threads 100000|--threads 100000: outside the valid range \(valid: \[0, 4096\]"
  "range: model init --seed beyond 64 bits|model init --config bert-tiny --out m2 --seed 99999999999999999999|--seed 99999999999999999999: outside the valid range \(valid: \[0, 1e\+18\]\)"
  "range: bench comm --min-bytes 0 (was an endless loop)|bench comm --min-bytes 0|--min-bytes 0: outside the valid range"
  "range: data vocab --size 1e12|data vocab --input corpus.txt --out v2.txt --size 1e12|--size 1e12: outside the valid range"
  "output: report --out /dev/full (was replaced by a file)|report run --out /dev/full|/dev/full: is a character device; joule writes its outputs as regular files"
  "output: report --out a FIFO|report run --out fifo|fifo: is a FIFO"
  "output: report --out a directory|report run --out a_dir/|a_dir/: is a directory"
  "output: data synth --out a symbolic link|data synth --out link.txt --documents 10|link.txt: is a symbolic link"
  "output: data vocab --out /dev/null|data vocab --input corpus.txt --out /dev/null --size 100|/dev/null: is a character device"
  "verified: export of a corrupt checkpoint|export --checkpoint damaged/corrupt --out e1|damaged/corrupt: model.safetensors does not have the checksum the manifest records \(its content changed\); not exported"
  "verified: export of an unfinished checkpoint|export --checkpoint damaged/incomplete --out e2|damaged/incomplete: incomplete \(no COMPLETE marker"
  "verified: data create over a finished set with an edited shard|data create $create_args --out edited|edited/train/part_00001.hdf5 does not have the checksum metadata.json records.*was changed after it was made"
  "inside: metadata.json entry with ..|data create $create_args --out meta_out|meta_out/metadata.json: entry \"../shards/train/part_00000.hdf5\" climbs out"
  "input: the same --input twice|data create $create_args --input ./corpus.txt --out twice|--input: ./corpus.txt is the same file as corpus.txt: its documents would be in the data set twice"
  "inside: manifest entry with ..|export --checkpoint damaged/climbs --out e3|manifest.json: entry \"../../shards/train/part_00000.hdf5\" climbs out with \"..\""
  "inside: manifest entry absolute|export --checkpoint damaged/absolute --out e4|manifest.json: entry \"/.*corpus.txt\" is an absolute path"
  "inside: manifest without the optimizer|export --checkpoint damaged/unlisted --out e5|manifest.json does not list optimizer.safetensors"
  "inside: resume from a manifest that climbs out|train --config run.toml --run-dir run_climbs --resume run_climbs/checkpoints/step_00000004|entry \"../../shards/train/part_00000.hdf5\" climbs out"
  "unreadable: a dangling shard link (was skipped)|train --config run.toml --run-dir r --data dangling|dangling/part_00001.hdf5: a symbolic link to nothing; it is a shard of dangling"
  "unreadable: a directory named like a shard|train --config run.toml --run-dir r --data not_a_file|not_a_file/part_00001.hdf5: not a regular file"
  "unreadable: eval of a dangling shard|eval --model model --data dangling|dangling/part_00001.hdf5: a symbolic link to nothing"
  "data: resume onto a replaced shard|train --config run.toml --run-dir run_plain --data plain_edit --resume auto|the data is not what the run trained on: training data plain_edit \(recorded as plain\) differs: changed: part_00001.hdf5"
  "data: resume onto one more shard|train --config run.toml --run-dir run_plain --data plain_more --resume auto|training data plain_more \(recorded as plain\) differs: added: part_00002.hdf5"
  "data: --vocab not the shards' vocabulary|train --config run.toml --run-dir r --vocab other_vocab.txt|other_vocab.txt: not the vocabulary the shards of shards/train were made with"
  "data: the training shards as eval data|train --config run.toml --run-dir r --eval-data shards/train|eval shard .*/shards/train/part_00000.hdf5 has the content of training shard"
  "data: eval data made from the training text|train --config run.toml --run-dir r --eval-data again/eval|were both made from corpus.txt"
  "raw: eval past max_position_embeddings (was a LibTorch backtrace)|eval --model mp32 --data shards/eval|shards/eval: the shards' sequence length 64 exceeds the max_position_embeddings 32 of the model in mp32"
  "raw: summary.json a directory (was basic_filebuf)|summary dirsum|dirsum/summary.json: is a directory, not a file"
  "raw: an empty model config (was nlohmann's message)|model init --config empty.json --out m3|empty.json: an empty file"
  "raw: a TOML syntax error (was 9 lines of toml11)|train --config bad_syntax.toml --run-dir r|bad_syntax.toml: line 1: TOML syntax error: "
  "raw: an unknown flag (was cxxopts' wording)|data synth --out z.txt --bogus|joule data synth: error: Option 'bogus' does not exist"
  "raw: a command group alone|data|'data' needs one of its commands: data synth, "
  "output: into a directory that does not exist|data synth --out nodir/x.txt --documents 10|nodir/x.txt: cannot write: nodir does not exist"
  "output: model init over a model (was replaced)|model init --config bert-tiny --out model|--out model already holds a model directory \(config.json\): not replaced"
  "output: a fresh run over a finished one (was mixed)|train --config run.toml --run-dir finished|finished already holds another run's summary.json"
  "output: a run into the data set|train --config run.toml --run-dir shards|shards already holds a data set \(metadata.json\)"
  "input: --resume a model directory|train --config run.toml --run-dir r --resume model|--resume model: not a checkpoint \(no manifest.json"
  "input: export of a file|export --checkpoint corpus.txt --out e6|corpus.txt: not a directory"
  "range: a model config key past its range (was an allocator error)|train --config run.toml --run-dir r --model cfg_huge.json|cfg_huge.json: 'max_position_embeddings' must be in \[1, 65536\].*found 100000000000"
  "range: --steps abc is named as typed (was --set train.steps)|train --config run.toml --run-dir r --steps abc|--steps abc: not a number \(valid: \[0, "
  "input: eval --model a preset name|eval --model bert-tiny --data shards/eval|--model bert-tiny: no such directory \(a preset name"
  "input: eval --model a checkpoint|eval --model $ck --data shards/eval|--model $ck: a joule checkpoint, not a model directory"
  "input: eval --model a run directory|eval --model run --data shards/eval|--model run: a run directory, not a model directory"
  "input: eval of a data set made without eval/ (was: no shards)|eval --model model --data noeval|noeval: this .joule data create. output has no eval/"
  "input: model weights joule does not read (was trained from fresh weights)|train --config run.toml --run-dir r --model binw|model.config binw: the weights are in pytorch_model.bin"
  "data: a model trained with another vocabulary (was a safetensors hint)|train --config run.toml --run-dir r --model model_30522|model.config model_30522 was trained with a vocabulary of 30522 tokens; the data's .*vocab.txt has [0-9]+"
  "output: data create --out a symbolic link (was replaced)|data create $create_args --out lnk_out|--out lnk_out is a symbolic link \(to a_dir\)"
  "output: data create of an empty input (left OUT.partial)|data create --input empty_in.txt --vocab vocab.txt --out e_out|empty_in.txt: an empty input file"
  "data: train on a shard edited after data create|train --config run.toml --run-dir r --data edited/train|edited/train/part_00001.hdf5: its content \(checksum [0-9a-f]+\) is not what .*metadata.json records"
)

e2e_refusal_table 60 regex "$joule"
n=$e2e_cases
(( n >= 30 )) || fail "only $n cases"
[[ -c /dev/full && -c /dev/null ]] || fail "a device node was replaced"
[[ -p fifo ]] || fail "the FIFO was replaced"

echo "-- paths as users type them: --data with a trailing slash, an --input with a comma, an --out with a trailing slash"
"$joule" train --config run.toml --run-dir slash_run --data shards/train/ --set train.steps=1 > ../logs/slash_data.log 2>&1 ||
  { cat ../logs/slash_data.log; fail "--data shards/train/ (a trailing slash)"; }
cp corpus.txt "with,comma.txt"
"$joule" data vocab --input "with,comma.txt" --out comma_vocab.txt --size 300 > ../logs/comma.log 2>&1 || { cat ../logs/comma.log; fail "an --input holding a comma"; }
"$joule" data create --input "with,comma.txt" --vocab vocab.txt --out "slash out/" --seq-len 64 --max-pred 10 > ../logs/slash.log 2>&1 ||
  { cat ../logs/slash.log; fail "an --out with a space and a trailing slash"; }
[[ -f "slash out/metadata.json" && ! -e "slash out/.partial" && ! -e "slash out.partial" ]] || fail "--out 'slash out/' did not make 'slash out'"

echo "-- inputs as data create takes them, in data vocab too (a directory, an @LIST relative to itself); a data create root"
mkdir -p in_dir/sub lists && cp corpus.txt in_dir/sub/ && echo "../corpus.txt" > lists/inputs.txt
"$joule" data vocab --input corpus.txt --out file_vocab.txt --size 300 > /dev/null 2>&1 || fail "data vocab of corpus.txt"
"$joule" data vocab --input in_dir --out dir_vocab.txt --size 300 > /dev/null 2>&1 || fail "data vocab --input in_dir"
(cd a_dir && "$joule" data vocab --input @../lists/inputs.txt --out ../list_vocab.txt --size 300 > /dev/null 2>&1) ||
  fail "data vocab --input @../lists/inputs.txt (an entry relative to the list)"
cmp -s file_vocab.txt dir_vocab.txt && cmp -s file_vocab.txt list_vocab.txt || fail "data vocab of a directory or a list differs"
"$joule" data inspect shards 2>&1 | grep -q "^dataset shards/train: " || fail "data inspect of a data create root"
"$joule" eval --model model --data shards > ../logs/eval_root.json 2> /dev/null || fail "eval of a data create root"
"$joule" eval --model model --data shards/eval > ../logs/eval_split.json 2> /dev/null || fail "eval of shards/eval"
cmp -s ../logs/eval_root.json ../logs/eval_split.json || fail "eval of a data create root is not eval of its eval/"
"$joule" train --config run.toml --run-dir cfgonly_run --model cfgonly --set train.steps=1 > ../logs/cfgonly.log 2>&1 ||
  { cat ../logs/cfgonly.log; fail "a run from a model directory with config.json alone"; }
grep -q "^initial weights: fresh (seed " ../logs/cfgonly.log || { cat ../logs/cfgonly.log; fail "no line saying the weights are fresh"; }

echo "-- other data accepted on resume (--accept-data-change): a new data segment, recorded and said"
cp -r run_plain run_accept
"$joule" train --config run.toml --run-dir run_accept --data plain_more --resume auto --accept-data-change > ../logs/accept.log 2>&1 ||
  { cat ../logs/accept.log; fail "a resume with --accept-data-change failed"; }
grep -q "note: data segment 2 starts at step 2 (--accept-data-change): training data plain_more (recorded as plain) differs: added: part_00002.hdf5" ../logs/accept.log ||
  { cat ../logs/accept.log; fail "no note on the new data segment"; }
python3 - run_accept/checkpoints/step_00000004/trainer_state.json <<'PY' || fail "the checkpoint does not record two data segments"
import json, sys
segments = json.load(open(sys.argv[1]))["data"]["segments"]
assert [s["from_step"] for s in segments] == [0, 2], segments
assert len(segments[1]["train"]["shards"]) == 3, segments[1]["train"]
PY
"$joule" train --config run.toml --run-dir run_accept --data plain_more --resume auto --set train.steps=6 > ../logs/accept2.log 2>&1 ||
  { cat ../logs/accept2.log; fail "the next resume on the accepted data failed"; }
grep -q '"data segment 2 from step 2 (--accept-data-change): training data plain_more, 3 shard(s), ' run_accept/summary.json ||
  fail "the run's summary.json does not name its second data segment"

echo "-- data create after a damaged progress.json: said, the work made again, the same shards"
for damage in '{"format": "joule-data-create-progress", "argu' '{"format": "joule-data-create-progress", "arguments": {}}'; do
  rm -rf prog prog.partial && mkdir prog.partial && printf '%s' "$damage" > prog.partial/progress.json
  # shellcheck disable=SC2086
  "$joule" data create $create_args --out prog > ../logs/prog.log 2>&1 || { cat ../logs/prog.log; fail "data create after a damaged progress.json"; }
  grep -Eq "^note: prog.partial/progress.json (is damaged \(not a JSON object\)|lacks 'chunks' \(damaged\)): the earlier run's shards are made again" ../logs/prog.log ||
    { cat ../logs/prog.log; fail "no note on the damaged progress.json"; }
  for f in shards/train/*.hdf5 shards/eval/*.hdf5; do cmp -s "$f" "prog/${f#shards/}" || fail "prog/${f#shards/} differs"; done
done

echo "-- JOULE_FAULT in the release binary: ignored, said so, the shards untouched"
e2e_snapshot ../logs/fault_before
JOULE_FAULT="corrupt-shard:rank=0,step=1" "$joule" train --config run.toml --run-dir fault_run > ../logs/fault.log 2>&1 ||
  { cat ../logs/fault.log; fail "a run with JOULE_FAULT set failed"; }
grep -q "JOULE_FAULT is set and ignored: this joule is not built for fault injection" ../logs/fault.log ||
  { cat ../logs/fault.log; fail "no note that JOULE_FAULT is ignored"; }
for f in shards/train/*.hdf5; do
  grep -q "$(b2sum "$f" | cut -d' ' -f1)" ../logs/fault_before || fail "$f changed under JOULE_FAULT=corrupt-shard"
done

echo "-- eval figures do not depend on --batch (the mean over every masked prediction and every sequence)"
"$joule" eval --model model --data shards/eval --batch 64 > ../logs/eval64.json 2> /dev/null || fail "eval --batch 64"
"$joule" eval --model model --data shards/eval --batch 7 > ../logs/eval7.json 2> /dev/null || fail "eval --batch 7"
python3 - ../logs/eval64.json ../logs/eval7.json <<'PY' || fail "eval figures depend on --batch"
import json, sys
a, b = (json.load(open(p)) for p in sys.argv[1:])
for key in ("mlm_loss", "nsp_loss", "loss", "mlm_accuracy", "nsp_accuracy", "sequences"):
    tolerance = 1e-5 * abs(a[key]) if "loss" in key else 0
    assert abs(a[key] - b[key]) <= tolerance, (key, a[key], b[key])
print(f"   batch 64 and batch 7: mlm_loss {a['mlm_loss']:.6f} / {b['mlm_loss']:.6f}, nsp_loss {a['nsp_loss']:.6f} / {b['nsp_loss']:.6f}")
PY

echo "-- a torn metrics.jsonl: report leaves the partial record out, a resume cuts it back once"
cp -r run torn && printf '{"step": 5, "sequ' >> torn/metrics.jsonl
"$joule" report torn > ../logs/torn_report.log 2>&1 || { cat ../logs/torn_report.log; fail "report of a run with a torn metrics.jsonl"; }
grep -q "metrics.jsonl ends in a partial record of 17 byte(s)" ../logs/torn_report.log || { cat ../logs/torn_report.log; fail "no note on the partial record"; }
"$joule" train --config run.toml --run-dir torn --resume auto --set train.steps=6 > ../logs/torn_resume.log 2>&1 ||
  { cat ../logs/torn_resume.log; fail "resume of a run with a torn metrics.jsonl"; }
grep -q "metrics.jsonl ended in a partial record of 17 byte(s) (a run killed while writing it): cut back" ../logs/torn_resume.log ||
  { cat ../logs/torn_resume.log; fail "the resume did not cut the partial record"; }
python3 -c "import json; [json.loads(l) for l in open('torn/metrics.jsonl')]" || fail "metrics.jsonl is not whole JSON lines after the resume"
"$joule" report torn > /dev/null 2>&1 || fail "report after the resume"
echo "-- data create on a disk that fills: ENOSPC named, no crash, no HDF5 dump; with room again it resumes, bit-exact"
full_disk=skipped
if [[ $(id -u) -eq 0 ]] && mkdir -p disk && mount -t tmpfs -o size=64m tmpfs disk 2>/dev/null; then
  "$joule" data synth --out big.txt --documents 3000 --seed 1 > /dev/null || fail "data synth"
  big_args="--input big.txt --vocab vocab.txt --seq-len 128 --max-pred 20 --shards 4 --eval-documents 200"
  # shellcheck disable=SC2086
  "$joule" data create $big_args --out big_ref > /dev/null || fail "data create on a disk with room"
  for size in 400k 1200k 2000k 2400k; do  # full while writing chunks, flushing and closing shards (measured)
    mount -o remount,size=$size disk && rm -rf disk/*
    # shellcheck disable=SC2086
    "$joule" data create $big_args --out disk/shards > ../logs/full_$size.log 2>&1
    rc=$?
    [[ $rc -eq 1 ]] || { cat ../logs/full_$size.log; umount disk; fail "a disk full at $size: exit $rc (expected 1)"; }
    grep -q "joule data create: error: disk/shards.partial/.*: No space left on device (errno 28" ../logs/full_$size.log &&
      grep -q "what to do: the file system is full" ../logs/full_$size.log && ! grep -q "HDF5-DIAG" ../logs/full_$size.log ||
      { cat ../logs/full_$size.log; umount disk; fail "a disk full at $size: no clear ENOSPC error naming the shard"; }
  done
  mount -o remount,size=64m disk
  # shellcheck disable=SC2086
  "$joule" data create $big_args --out disk/shards > ../logs/full_resume.log 2>&1 || { cat ../logs/full_resume.log; umount disk; fail "resume with room"; }
  for f in big_ref/train/*.hdf5 big_ref/eval/*.hdf5; do cmp -s "$f" "disk/shards/${f#big_ref/}" || { umount disk; fail "$f differs after the resume"; }; done
  umount disk
  full_disk="4 sizes"
else
  echo "   (skipped: mounting a small tmpfs needs root)"
fi
echo "PASS ($n hostile cases, a new data segment, a damaged progress.json, JOULE_FAULT ignored, eval independent of --batch, a torn metrics.jsonl, full disks: $full_disk)"
