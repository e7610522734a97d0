#!/usr/bin/env bash
# `joule data create` at scale, beside NVIDIA's create_pretraining_data.py (a benchmark, not a test).
#   bash tools/bench/data_prep.sh JOULE NVIDIA_SCRIPT [GB] [SLICE_MB]
# JOULE: the joule binary. NVIDIA_SCRIPT: create_pretraining_data.py from NVIDIA DeepLearningExamples,
# PyTorch/LanguageModeling/BERT (https://github.com/NVIDIA/DeepLearningExamples), run from its own directory, which holds
# its tokenization.py and file_utils.py; it needs h5py, numpy, tqdm and six (pip). It is run, never copied here.
# Makes a corpus of GB gigabytes (default 1; `joule data synth` text, files of ~20 MB), runs `joule data create` on it
# (seq 128, 20 predictions, dupe factor 5, --memory-budget 2GB) on all cores and on one, then both tools on the first
# SLICE_MB (default 2) of it on one core. Prints one JSON line per run and the per-core ratios.
# NVIDIA's file_utils.py imports PyTorch when it is installed, which its data creation never uses (~3 CPU-seconds,
# 500 MB); USE_TORCH=0, its own switch, leaves that out, so the reference is timed at its fastest.
set -euo pipefail
joule=$(realpath "$1") nvidia=$(realpath "$2") gb=${3:-1} slice_mb=${4:-2}
work=${WORK:-$(mktemp -d)}
mkdir -p "$work" && cd "$work"
echo "work directory: $work"

if [[ ! -d corpus ]]; then
  mkdir -p corpus
  files=$(( (gb * 1024 + 19) / 20 ))
  for i in $(seq 0 $((files - 1))); do "$joule" data synth --out corpus/part_$i.txt --documents 70000 --seed $((i + 1)) > /dev/null; done
  head -n 100000 corpus/part_0.txt > vocab_sample.txt
  "$joule" data vocab --input vocab_sample.txt --out vocab.txt --size 30522 > /dev/null
fi
corpus_bytes=$(cat corpus/*.txt | wc -c)

# time -v's figures: wall seconds, CPU seconds, peak resident KB.
measure() {
  local log=$1; shift
  /usr/bin/time -f "%e %U %S %M" -o "$log.time" "$@" > "$log" 2>&1 || { cat "$log"; return 1; }
  read -r wall user sys rss < "$log.time"
  echo "$wall $(echo "$user + $sys" | bc) $rss"
}

report() {  # NAME BYTES SEQUENCES WALL CPU RSS_KB
  python3 -c "
import json, sys
name, nbytes, seqs, wall, cpu, rss = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), *map(float, sys.argv[4:7])
print(json.dumps({'record': 'data_prep', 'run': name, 'text_mb': round(nbytes / 1e6, 1), 'sequences': seqs, 'wall_s': wall, 'cpu_s': round(cpu, 2),
                  'mb_per_s': round(nbytes / 1e6 / wall, 2), 'mb_per_cpu_s': round(nbytes / 1e6 / cpu, 3),
                  'seq_per_s': round(seqs / wall), 'peak_rss_mb': round(rss / 1024)}))" "$@"
}

# The whole corpus on all cores, then on one: CPU seconds per MB of text at scale (start-up amortized).
full_cpu_per_mb=
for threads in $(nproc) 1; do
  rm -rf full
  read -r wall cpu rss <<< "$(measure full.log "$joule" data create --input corpus --vocab vocab.txt --out full --memory-budget 2GB --threads "$threads")"
  seqs=$(python3 -c "import json; print(json.load(open('full/metadata.json'))['train_sequences'])")
  report "joule, $threads thread(s), ${gb} GB" "$corpus_bytes" "$seqs" "$wall" "$cpu" "$rss"
  full_cpu_per_mb="$full_cpu_per_mb $(echo "$cpu / ($corpus_bytes / 1000000)" | bc -l)"
done

head -c $((slice_mb * 1024 * 1024)) corpus/part_0.txt > slice_raw.txt
sed '$d' slice_raw.txt > slice.txt  # whole lines only
slice_bytes=$(wc -c < slice.txt)
rm -rf slice_joule
read -r wall cpu rss <<< "$(measure joule_slice.log "$joule" data create --input slice.txt --vocab vocab.txt --out slice_joule --threads 1)"
seqs=$(python3 -c "import json; print(json.load(open('slice_joule/metadata.json'))['train_sequences'])")
report "joule, 1 thread, slice" "$slice_bytes" "$seqs" "$wall" "$cpu" "$rss"
joule_cpu=$cpu

read -r wall cpu rss <<< "$(cd "$(dirname "$nvidia")" && USE_TORCH=0 measure "$work/nvidia_slice.log" python3 "$nvidia" --input_file "$work/slice.txt" \
  --output_file "$work/nvidia_slice.hdf5" --vocab_file "$work/vocab.txt" --do_lower_case --max_seq_length 128 \
  --max_predictions_per_seq 20 --masked_lm_prob 0.15 --random_seed 12345 --dupe_factor 5)"
seqs=$(python3 -c "import h5py; print(h5py.File('$work/nvidia_slice.hdf5')['input_ids'].shape[0])")
report "NVIDIA create_pretraining_data.py, slice" "$slice_bytes" "$seqs" "$wall" "$cpu" "$rss"
read -r all_cores one_core <<< "$full_cpu_per_mb"
python3 -c "
nvidia = float($cpu) / ($slice_bytes / 1e6)
print(f'per-core speed, joule / NVIDIA (CPU seconds per MB of text): {nvidia / float($one_core):.1f}x at scale on one thread, '
      f'{nvidia / float($all_cores):.1f}x at scale on $(nproc) threads, {float($cpu) / float($joule_cpu):.1f}x on the slice alone '
      f'(joule start-up included)')"
