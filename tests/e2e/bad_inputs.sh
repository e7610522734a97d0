#!/usr/bin/env bash
# The bad-input table, end to end at 2 ranks. Every case must give one clear error that names the file or
# key, a "what to do" line, a non-zero exit on every rank within 60 s (no rank left waiting), and leave
# every file in the work directory as it was (nothing overwritten, no half-made run directory). Then a run
# directory in use by another job (refused, naming the holder; a killed holder's lock noted and taken over) and
# full disks (an error naming the file and ENOSPC; a free-space check before the first write).
# usage: bad_inputs.sh JOULE MPIEXEC MAKE_BAD_SHARD WORKDIR
set -uo pipefail
joule=$1 mpiexec=$2 make_bad_shard=$3 work=$4
source "$(dirname "$0")/../support/e2e_setup.sh"
e2e_workdir "$work/files"
mkdir -p ../logs

e2e_make_data 200 5 400
cat > run.toml <<'TOML'
[model]
config = "bert-tiny"
[data]
train = "shards/train"
[train]
steps = 10
micro_batch = 4
[checkpoint]
every_steps = 5
TOML
mpi "$joule" train --config run.toml --run-dir good > ../logs/good.log 2>&1 || { cat ../logs/good.log; fail "the good run failed"; }
good_shard=shards/train/part_00000.hdf5

# A shard directory holding one good shard and one broken one: bad_KIND/train/, vocab beside it.
bad_shards() {
  local kind=$1 dir=bad_$1/train
  mkdir -p $dir && cp vocab.txt bad_$kind/ && cp $good_shard $dir/part_00000.hdf5
  case $kind in
    truncated) head -c $(( $(stat -c %s $good_shard) / 2 )) $good_shard > $dir/part_00001.hdf5 ;;
    not-hdf5) echo "input_ids,input_mask" > $dir/part_00001.hdf5 ;;
    *) "$make_bad_shard" $kind $good_shard $dir/part_00001.hdf5 || fail "make_bad_shard $kind" ;;
  esac
}
# A copy of the good run whose step-10 checkpoint is damaged by the command given.
bad_checkpoint() {
  local name=$1
  shift
  cp -r good $name && (cd $name/checkpoints/step_00000010 && eval "$@")
}
for k in missing-dataset wrong-dtype wrong-shape ids-beyond-vocab positions-beyond-seq-len truncated not-hdf5 empty no-predictions zero-rows \
  unknown-filter; do bad_shards $k; done
# Files of two data sets in one directory: a data create output with a shard it did not write.
cp -r shards mixed && cp $good_shard mixed/train/part_00009.hdf5
# A model config whose segment embedding has one row (shards use segment ids 0 and 1).
"$joule" model init --config bert-tiny --seed 1 --out tiny_model > /dev/null || fail "model init"
sed 's/"type_vocab_size": *2/"type_vocab_size": 1/' tiny_model/config.json > tvs1.json
grep -q '"type_vocab_size": *1' tvs1.json || fail "could not make tvs1.json"
printf 'not a directory\n' > a_file
printf '[model]\nconfig = "bert-tiny"\n[train]\nstepz = 10\n' > unknown_key.toml
printf '[model]\nconfig = "bert-tiny"\n[train]\nsteps = "ten"\n' > wrong_type.toml
bad_checkpoint ck_truncated 'head -c 1000 model.safetensors > t && mv t model.safetensors'
bad_checkpoint ck_checksum 'printf "\x7f" | dd of=optimizer_shard_1_of_2.safetensors bs=1 seek=4000 conv=notrunc status=none'
bad_checkpoint ck_version 'sed -i "s/\"format_version\": [0-9]*/\"format_version\": 99/" manifest.json'
bad_checkpoint ck_only_bad 'rm -rf ../step_00000005 && head -c 1000 model.safetensors > t && mv t model.safetensors'
cp -r good ck_shape

# name | arguments after `joule train` | text the error must contain (the file or key, and what is wrong)
cases=(
  "shard: missing dataset|--config run.toml --data bad_missing-dataset/train --run-dir r|bad_missing-dataset/train/part_00001.hdf5: dataset 'masked_lm_ids': missing"
  "shard: wrong dtype|--config run.toml --data bad_wrong-dtype/train --run-dir r|part_00001.hdf5: dataset 'input_ids': expected an integer type"
  "shard: wrong shape|--config run.toml --data bad_wrong-shape/train --run-dir r|part_00001.hdf5: dataset 'input_ids': expected shape [N, width]"
  "shard: ids >= vocab|--config run.toml --data bad_ids-beyond-vocab/train --run-dir r|part_00001.hdf5: .*token id 1000000 is not below the vocabulary size"
  "shard: positions >= seq len|--config run.toml --data bad_positions-beyond-seq-len/train --run-dir r|part_00001.hdf5: dataset 'masked_lm_positions': position 64 is outside the sequence length 64"
  "shard: truncated|--config run.toml --data bad_truncated/train --run-dir r|bad_truncated/train/part_00001.hdf5: cannot open as HDF5 (truncated or corrupt"
  "shard: not HDF5|--config run.toml --data bad_not-hdf5/train --run-dir r|bad_not-hdf5/train/part_00001.hdf5: not an HDF5 file"
  "shard: empty|--config run.toml --data bad_empty/train --run-dir r|bad_empty/train/part_00001.hdf5: empty shard (0 sequences)"
  "config: unknown key|--config unknown_key.toml --data shards/train --run-dir r|unknown_key.toml: unknown key 'train.stepz'; valid keys: "
  "config: wrong type|--config wrong_type.toml --data shards/train --run-dir r|wrong_type.toml: key 'train.steps' must be an integer, found \"ten\""
  "config: impossible batch split|--config run.toml --run-dir r --set train.global_batch=12|train.global_batch 12 is not divisible by train.micro_batch 4 x world size 2"
  "config: unknown model|--config run.toml --run-dir r --set model.config=bert-huge|bert-huge: no such model config file or directory, and not a preset (presets in .*: bert-large, bert-base, bert-tiny, layoutlm-base)"
  "checkpoint: truncated|--config run.toml --run-dir ck_truncated --resume ck_truncated/checkpoints/step_00000010|ck_truncated/checkpoints/step_00000010: model.safetensors has 1000 bytes, the manifest says"
  "checkpoint: checksum mismatch|--config run.toml --run-dir ck_checksum --resume ck_checksum/checkpoints/step_00000010|ck_checksum/checkpoints/step_00000010: optimizer_shard_1_of_2.safetensors does not have the checksum the manifest records"
  "checkpoint: other format version|--config run.toml --run-dir ck_version --resume ck_version/checkpoints/step_00000010|ck_version/checkpoints/step_00000010: format version 99, this joule reads versions 1 to 2"
  "checkpoint: other model shape|--config run.toml --run-dir ck_shape --resume ck_shape/checkpoints/step_00000010 --set model.config=bert-base|ck_shape/checkpoints/step_00000010/model.safetensors: .*another model shape"
  "checkpoint: none verifies (--resume auto)|--config run.toml --run-dir ck_only_bad --resume auto|ck_only_bad/checkpoints: --resume auto found checkpoints but none verifies"
  "shard: rows without predictions|--config run.toml --data bad_no-predictions/train --run-dir r|part_00001.hdf5: dataset 'masked_lm_positions': .* rows have no masked prediction"
  "shard: all-zero rows|--config run.toml --data bad_zero-rows/train --run-dir r|part_00001.hdf5: dataset 'input_mask': .* rows have no real token"
  "shard: unknown compression filter|--config run.toml --data bad_unknown-filter/train --run-dir r|part_00001.hdf5: dataset 'input_ids' is compressed with HDF5 filter 32000"
  "data: two data sets mixed|--config run.toml --data mixed/train --run-dir r|mixed/train: holds 3 shard(s) of .* sequences, but mixed/metadata.json records 2"
  "config: infinite learning rate|--config run.toml --run-dir r --set optimizer.lr=inf|optimizer.lr = inf is not a finite number"
  "config: beta1 out of range|--config run.toml --run-dir r --set optimizer.beta1=1.5|optimizer.beta1 = 1.5 is outside [0, 1)"
  "config: negative checkpoint interval|--config run.toml --run-dir r --set checkpoint.every_steps=-1|checkpoint.every_steps = -1 is outside [0, inf)"
  "config: batch larger than the data (resume)|--config run.toml --run-dir good --resume auto --set train.global_batch=80000|the global batch 80000 .* is larger than the .* sequences of shards/train"
  "model: one segment embedding|--config run.toml --run-dir r --set model.config=tvs1.json|model.config tvs1.json: type_vocab_size is 1"
  "resume: no such directory|--config run.toml --run-dir good --resume nope|--resume nope: no such directory"
  "resume: the run directory itself|--config run.toml --run-dir good --resume good|--resume good: a run directory, not a checkpoint"
  "resume: Auto|--config run.toml --run-dir good --resume Auto|--resume Auto: did you mean --resume auto"
  "run dir: a regular file|--config run.toml --run-dir a_file|--run-dir a_file is a regular file, not a directory"
  "set: a value with a comma|--config run.toml --run-dir r --set accounting.meters=model,bogus|accounting.meters: 'bogus' is unknown"
)

# The table's texts are literal: brackets and parentheses are escaped for the regular expression.
e2e_refusal_table 120 literal "$mpiexec" "${MPI_ARGS[@]}" "$joule" train
n=$e2e_cases
(( n >= 30 )) || fail "only $n cases"

echo "-- ranks that disagree (an MPMD launch with another seed on rank 1): every rank stops naming both hashes, nothing written"
rm -rf mpmd
timeout 120 "$mpiexec" --oversubscribe --allow-run-as-root --bind-to none -x OMP_NUM_THREADS=1 \
  -n 1 "$joule" train --config run.toml --run-dir mpmd : -n 1 "$joule" train --config run.toml --run-dir mpmd --set train.seed=99 \
  > ../logs/mpmd.log 2>&1 && { cat ../logs/mpmd.log; fail "ranks with different configs trained"; }
grep -q "1 rank(s) resolved another config than rank 0 and 0 rank(s) indexed another data set (this rank: config .*, data .*; rank 0: config .*, data .*)" ../logs/mpmd.log ||
  { cat ../logs/mpmd.log; fail "no error naming the config disagreement and both ranks' hashes"; }
[[ ! -e mpmd/config.toml ]] || fail "the disagreeing run wrote mpmd/config.toml"

echo "-- a run directory in use: the second job fails at once naming the holder; the first is untouched"
rm -rf busy
mpi "$joule" train --config run.toml --run-dir busy --set train.steps=4000 > ../logs/busy1.log 2>&1 &
first=$!
for _ in $(seq 1 600); do grep -q "^step " ../logs/busy1.log 2>/dev/null && break; sleep 0.1; done
timeout 60 "$mpiexec" "${MPI_ARGS[@]}" "$joule" train --config run.toml --run-dir busy --resume auto > ../logs/busy2.log 2>&1
rc=$?
grep -q "joule train: error: busy is in use by another joule train (host .* pid [0-9]* started " ../logs/busy2.log && [[ $rc -ne 0 ]] ||
  { cat ../logs/busy2.log; fail "a second job on a busy run directory: rc $rc"; }
# A crash: SIGKILL to every process of the first job at once (ranks and launcher).
kill -9 $(e2e_own_pids "--run-dir busy") 2>/dev/null; wait $first 2>/dev/null
[[ -s busy/.joule.lock ]] || fail "a killed job's lock record is gone"
mpi "$joule" train --config run.toml --run-dir busy --resume auto --set train.steps=10 > ../logs/busy3.log 2>&1 || { cat ../logs/busy3.log; fail "resume after a killed job"; }
grep -q "note: the previous job on this run directory (host .* pid [0-9]* started .*) ended without releasing its lock" ../logs/busy3.log ||
  { cat ../logs/busy3.log; fail "no note about the killed job's lock"; }
[[ ! -e busy/.joule.lock ]] || fail "a job that ended left its lock file"

echo "-- a run's history onto a device, and a disk that fills: the error names the file and the cause"
rm -rf full && mkdir full && ln -s /dev/full full/metrics.jsonl  # refused before any step: a run keeps its history in its own files
mpi "$joule" train --config run.toml --run-dir full > ../logs/full.log 2>&1 && { cat ../logs/full.log; fail "a run whose metrics.jsonl is /dev/full exited 0"; }
grep -q "joule train: error: full/metrics.jsonl: is a symbolic link" ../logs/full.log || { cat ../logs/full.log; fail "no error naming the linked metrics.jsonl"; }
if [[ $(id -u) -eq 0 ]] && mkdir -p small && mount -t tmpfs -o size=2m tmpfs small 2>/dev/null; then
  mpi "$joule" train --config run.toml --run-dir small/run > ../logs/small.log 2>&1
  rc=$?
  umount small
  [[ $rc -ne 0 ]] && grep -q "small/run: .* MiB free, one checkpoint needs .* MiB" ../logs/small.log || { cat ../logs/small.log; fail "no free-space check"; }
else
  echo "   (no tmpfs: skipped the 2 MiB file system case; it needs root)"
fi
echo "PASS ($n bad inputs, a busy run directory, full disks)"
