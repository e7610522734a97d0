#!/usr/bin/env bash
# The figures the README quotes of the demo (tools/demo.sh's run of configs/demo-tiny.toml), measured on this host:
# the run as the demo runs it (train.precision = auto) and again with --precision fp32; for each, the training wall
# time and the held-out eval's masked-LM accuracy at the last step (summary.json: wall_s, eval.mlm_accuracy), with the
# CPU and what auto chose. Writes tools/bench/results/demo.json; tests/docs/readme_figures.py holds the README to it.
#   bash tools/bench/demo_figures.sh        (after bash tools/demo.sh has made demo/shards)
set -euo pipefail
cd "$(dirname "$0")/../.."
joule=build/${JOULE_PRESET:-ci}/tools/joule
[[ -d demo/shards/train ]] || { echo "demo/shards: run bash tools/demo.sh first" >&2; exit 2; }
root=$( [[ $(id -u) -eq 0 ]] && echo --allow-run-as-root )
for precision in auto fp32; do
  rm -rf "demo/figures_$precision"
  # shellcheck disable=SC2086
  mpirun -np 2 --oversubscribe --bind-to none $root "$joule" train --config configs/demo-tiny.toml \
    --run-dir "demo/figures_$precision" --precision $precision > "demo/figures_$precision.log" 2>&1 ||
    { cat "demo/figures_$precision.log"; exit 1; }
done
python3 - <<'PY'
import json, platform, re
def run(precision):
    s = json.load(open(f"demo/figures_{precision}/summary.json"))
    return {"precision": s["workload"]["dtype"], "train_wall_s": round(s["wall_s"], 1),
            "eval_mlm_accuracy": round(s["eval"]["mlm_accuracy"], 4), "eval_sequences": s["eval"]["sequences"],
            "steps": s["steps"], "seq_per_s": round(s["seq_per_s"], 1)}
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
flags = next((l.split(":", 1)[1].split() for l in open("/proc/cpuinfo") if l.startswith("flags")), [])
out = {"what": "tools/demo.sh's training run (configs/demo-tiny.toml, 2 ranks), measured by tools/bench/demo_figures.sh",
       "cpu": cpu, "cores": len([l for l in open("/proc/cpuinfo") if l.startswith("processor")]),
       "avx512_bf16": "avx512_bf16" in flags, "amx_bf16": "amx_bf16" in flags,
       "auto": run("auto"), "fp32": run("fp32")}
json.dump(out, open("tools/bench/results/demo.json", "w"), indent=2)
open("tools/bench/results/demo.json", "a").write("\n")
print(json.dumps(out, indent=2))
PY
