#!/usr/bin/env bash
# The demo on real English text instead of the synthetic corpus: the prose of the Python 3.11 documentation (Debian's
# python3.11-doc; the PSF License Agreement for its documentation, tools/real_text_corpus.py says what is kept) ->
# WordPiece vocab -> packed NVIDIA-layout shards with a held-out eval set -> the demo's model and recipe
# (configs/demo-tiny.toml, 2 MPI ranks) -> its eval curve, beside the synthetic demo's when demo/run exists.
# Run tools/demo.sh (or tools/build.sh) first: this script uses the binary it built.
# usage: bash tools/demo_real_text.sh [OUT_DIR]   (default demo-real; about 2 minutes of training on 2 cores)
set -euo pipefail
cd "$(dirname "$0")/.."
joule=build/${JOULE_PRESET:-ci}/tools/joule
out=${1:-demo-real}
[[ -x $joule ]] || { echo "error: $joule is not built (bash tools/build.sh)" >&2; exit 1; }
mkdir -p "$out"

# The sources: the installed package's, else the package itself, unpacked here (apt-get download needs no root).
sources=/usr/share/doc/python3.11/html/_sources
if [[ ! -d $sources ]]; then
  sources=$out/python3.11-doc/usr/share/doc/python3.11/html/_sources
  if [[ ! -d $sources ]]; then
    (cd "$out" && apt-get download python3.11-doc) ||
      { echo "error: apt-get download python3.11-doc failed (run apt-get update first, as root)" >&2; exit 1; }
    dpkg -x "$out"/python3.11-doc_*.deb "$out/python3.11-doc"
  fi
fi
python3 tools/real_text_corpus.py "$sources" "$out/corpus.txt"
"$joule" data vocab --input "$out/corpus.txt" --out "$out/vocab.txt" --size 8000
"$joule" data create --input "$out/corpus.txt" --vocab "$out/vocab.txt" --out "$out/shards" \
  --seq-len 128 --max-pred 20 --dupe-factor 10 --shards 4 --eval-documents 20 --pack --max-per-pack 8 --replace
"$joule" data inspect "$out/shards/train" --samples 1
rm -rf "$out/run"
mpirun -np 2 --oversubscribe --bind-to none $( [[ $(id -u) -eq 0 ]] && echo --allow-run-as-root ) \
  "$joule" train --config configs/demo-tiny.toml --data "$out/shards" --run-dir "$out/run"

# The held-out masked-LM accuracy at each eval (every 200 steps), real text beside synthetic text. A step trains 26
# packed rows: about 29 sequences of real text (its sequences fill a row), 62 of synthetic text.
python3 - "$out/run" demo/run <<'PY'
import json, os, sys
def evals(run):
    path = os.path.join(run, "metrics.jsonl")
    if not os.path.exists(path):
        return {}
    return {l["step"]: (l["sequences"], l["eval"]["mlm_accuracy"]) for l in map(json.loads, open(path)) if "eval" in l}
real, synthetic = evals(sys.argv[1]), evals(sys.argv[2])
print("\nheld-out masked-LM accuracy, the demo's model and recipe (sequences trained by then):")
print(f"{'step':>6}  {'real text':>17}  {'synthetic (demo/run)':>22}")
cell = lambda e: f"{e[1]:.4f} ({e[0]:>6})" if e else "-"
for step in sorted(set(real) | set(synthetic)):
    print(f"{step:>6}  {cell(real.get(step)):>17}  {cell(synthetic.get(step)):>22}")
PY
