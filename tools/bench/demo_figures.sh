#!/usr/bin/env bash
# The figures the README quotes of the demo (tools/demo.sh's run of configs/demo-tiny.toml), measured on this host:
# the run as the demo runs it (packed shards, train.precision = auto) and again with --precision fp32; and the same
# sequences padded (demo/shards_padded: the same data create without --pack), 32 a micro-batch, as the demo trained
# before packing: for each, the training wall time and the held-out eval's masked-LM accuracy at the last step
# (summary.json: wall_s, eval.mlm_accuracy), with the CPU and what auto chose. demo/figures_auto/report.html draws the
# packed and padded runs' held-out accuracy side by side (joule report --compare). Writes tools/bench/results/demo.json;
# tests/docs/readme_figures.py holds the README to it.
#   bash tools/bench/demo_figures.sh        (after bash tools/demo.sh has made demo/corpus.txt and demo/shards)
set -euo pipefail
cd "$(dirname "$0")/../.."
joule=build/${JOULE_PRESET:-ci}/tools/joule
[[ -d demo/shards/train ]] || { echo "demo/shards: run bash tools/demo.sh first" >&2; exit 2; }
root=$( [[ $(id -u) -eq 0 ]] && echo --allow-run-as-root )
# tools/demo.sh's data create, without --pack
"$joule" data create --input demo/corpus.txt --vocab demo/vocab.txt --out demo/shards_padded --seq-len 128 \
  --max-pred 20 --dupe-factor 5 --shards 4 --eval-documents 200 > /dev/null
# name precision flags...
runs=("auto auto" "fp32 fp32" "padded auto --data demo/shards_padded/train --eval-data demo/shards_padded/eval \
--set train.micro_batch=32")
for run in "${runs[@]}"; do
  read -r name precision flags <<<"$run"
  rm -rf "demo/figures_$name"
  # shellcheck disable=SC2086
  mpirun -np 2 --oversubscribe --bind-to none $root "$joule" train --config configs/demo-tiny.toml \
    --run-dir "demo/figures_$name" --precision $precision $flags > "demo/figures_$name.log" 2>&1 ||
    { cat "demo/figures_$name.log"; exit 1; }
done
"$joule" report demo/figures_auto --compare demo/figures_padded > /dev/null
python3 - <<'PY'
import json, platform, re
def run(name):
    s = json.load(open(f"demo/figures_{name}/summary.json"))
    return {"precision": s["workload"]["dtype"], "train_wall_s": round(s["wall_s"], 1),
            "eval_mlm_accuracy": round(s["eval"]["mlm_accuracy"], 4), "eval_sequences": s["eval"]["sequences"],
            "steps": s["steps"], "sequences": s["sequences"], "seq_per_s": round(s["seq_per_s"], 1),
            "packed": s["workload"].get("pack", 0) > 0,
            "packing_efficiency": round(s["workload"].get("packing_efficiency", 0), 4)}
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
flags = next((l.split(":", 1)[1].split() for l in open("/proc/cpuinfo") if l.startswith("flags")), [])
out = {"what": "tools/demo.sh's training run (configs/demo-tiny.toml, 2 ranks), measured by tools/bench/demo_figures.sh",
       "cpu": cpu, "cores": len([l for l in open("/proc/cpuinfo") if l.startswith("processor")]),
       "avx512_bf16": "avx512_bf16" in flags, "amx_bf16": "amx_bf16" in flags,
       "auto": run("auto"), "fp32": run("fp32"), "padded": run("padded")}
json.dump(out, open("tools/bench/results/demo.json", "w"), indent=2)
open("tools/bench/results/demo.json", "a").write("\n")
print(json.dumps(out, indent=2))
PY
