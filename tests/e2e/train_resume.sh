#!/usr/bin/env bash
# End-to-end `joule train` at 2 ranks on a small synthetic corpus:
#  1. loss falls and eval masked-LM accuracy beats chance;
#  2. bit-exact resume: N steps uninterrupted == preempted twice (signal checkpoints, exit 75) + --resume auto,
#     with dropout on; throughput, MFU and projections over every segment; a finished run resumed (nothing to do, or
#     continued with more --steps); --data of a data create output evaluates on its own eval/;
#  3. a real SIGTERM to one rank: a checkpoint at the next step boundary and exit code 75 on every rank;
#  4. a corrupt newest checkpoint: --resume auto warns and takes the previous one.
# The runs use train.precision = auto: bf16 mixed precision where the CPU has AVX512-BF16 or AMX-BF16. Section 2a
# repeats the bit-exact resume in fp32 and checks that auto picks fp32 on a CPU without them (JOULE_CPU_ISA).
# usage: train_resume.sh JOULE MPIEXEC WORKDIR
set -euo pipefail
joule=$1 mpiexec=$2 work=$3
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../support/e2e_setup.sh"
e2e_workdir "$work"

e2e_make_data 400 3 600 --dupe-factor 3 --eval-documents 40
cat > run.toml <<'TOML'
[model]
config = "bert-tiny"
[data]
train = "shards/train"
eval = "shards/eval"
[train]
steps = 40
micro_batch = 8
accumulation = 2
seed = 7
log_every_steps = 10
[optimizer]
lr = 1e-2
warmup_fraction = 0.1
[checkpoint]
every_steps = 10
keep = 5
[eval]
every_steps = 40
batch = 32
TOML

echo "== 1. uninterrupted run"
mpi "$joule" train --config run.toml --run-dir a --set accounting.prometheus_file=a.prom > a.log 2>&1 || { cat a.log; fail "training failed"; }
python3 - <<'PY' || fail "loss did not fall or eval is at chance"
import json
rows = [json.loads(l) for l in open("a/metrics.jsonl")]
steps = [r for r in rows if "loss" in r]
evals = [r["eval"] for r in rows if "eval" in r]
vocab = sum(1 for _ in open("shards/vocab.txt"))
print("loss", steps[0]["loss"], "->", steps[-1]["loss"], "| eval mlm_acc", evals[-1]["mlm_accuracy"], "chance", 1 / vocab)
assert steps[-1]["loss"] < steps[0]["loss"] - 0.5
assert evals[-1]["mlm_accuracy"] > 5.0 / vocab
PY
[[ -f a/final/model.safetensors && -f a/final/config.json && -f a/summary.json ]] || fail "no final model directory or summary"
# auto: bf16 where the CPU multiplies bf16 in hardware; the log says which and why, summary and metrics name it.
auto_precision=fp32
grep -Eqw 'avx512_bf16|amx_bf16' /proc/cpuinfo && auto_precision=bf16
grep -q "^precision auto -> $auto_precision" a.log || { cat a.log; fail "auto did not pick $auto_precision on this CPU"; }
python3 - "$auto_precision" <<'PY' || fail "summary.json or metrics.jsonl do not name the precision"
import json, sys
s = json.load(open("a/summary.json"))
assert s["workload"]["dtype"] == sys.argv[1], s["workload"]
assert all(r["precision"] == sys.argv[1] for r in map(json.loads, open("a/metrics.jsonl")) if "loss" in r)
PY
grep -Eq '^joule_step\{run_id="[0-9a-f-]{36}"\} 40$' a.prom && grep -q '^joule_energy_kwh{' a.prom || { cat a.prom; fail "the Prometheus textfile lacks the last step or the energy"; }

echo "== 2. preempted at step 23 and at step 31 (between checkpoints), each time --resume auto"
set +e
JOULE_FAULT="preempt:rank=0,step=23" mpi -x JOULE_FAULT "$joule" train --config run.toml --run-dir b > b1.log 2>&1
rc=$?
set -e
[[ $rc -eq 75 ]] || { cat b1.log; fail "preemption exit code $rc, expected 75"; }
[[ -f b/checkpoints/step_00000023/COMPLETE ]] || fail "no checkpoint at the preemption step"
set +e
JOULE_FAULT="preempt:rank=0,step=31" mpi -x JOULE_FAULT "$joule" train --config run.toml --run-dir b --resume auto > b2.log 2>&1
rc=$?
set -e
[[ $rc -eq 75 ]] || { cat b2.log; fail "second preemption exit code $rc, expected 75"; }
grep -q "resumed from .*step_00000023 at step 23" b2.log || fail "did not resume from step 23"
mpi "$joule" train --config run.toml --run-dir b --resume auto > b3.log 2>&1 || { cat b3.log; fail "resume failed"; }
grep -q "resumed from .*step_00000031 at step 31" b3.log || fail "did not resume from step 31"
cmp a/final/model.safetensors b/final/model.safetensors || fail "resumed weights differ from the uninterrupted run"
# A bf16 run has no fp32 GEMMs: its resumes time the library as a fresh run does (2a: an fp32 resume keeps it).
if [[ $auto_precision == bf16 ]]; then
  ! grep -q "the checkpoint's" b/config.toml || { cat b/config.toml; fail "a bf16 resume kept the checkpoint's fp32 library"; }
fi
python3 -c "import json; s=json.load(open('b/summary.json')); assert s['segments']==3 and s['sequences']==40*32, s" || fail "summary does not cover the three segments"

echo "== 2a. fp32: bit-exact resume too; auto on a CPU without bf16 instructions is fp32"
# train.fp32_gemm auto picks oneDNN or the BLAS by timing them at start-up, so under load two fresh runs may pick
# different ones (seen in a clean-clone CI run of e2e.zero1_resume): the uninterrupted run and the first segment name
# the library; a resume with auto keeps its checkpoint's.
blas=(--set train.fp32_gemm=blas)
# fp32_resume_keeps LIB UNINTERRUPTED DIR: DIR trains on LIB until preempted at step 23, then resumes with
# train.fp32_gemm left at auto, which keeps the library its checkpoint ran whatever the timing says: config.toml
# names it, no warning of another library, and the weights equal the uninterrupted run's.
fp32_resume_keeps() {
  local lib=$1 whole=$2 dir=$3 rc
  set +e
  JOULE_FAULT="preempt:rank=0,step=23" mpi -x JOULE_FAULT "$joule" train --config run.toml --run-dir "$dir" --precision fp32 \
    --set "train.fp32_gemm=$lib" > "${dir}1.log" 2>&1
  rc=$?
  set -e
  [[ $rc -eq 75 ]] || { cat "${dir}1.log"; fail "fp32 ($lib) preemption exit code $rc, expected 75"; }
  mpi "$joule" train --config run.toml --run-dir "$dir" --precision fp32 --resume auto > "${dir}2.log" 2>&1 || { cat "${dir}2.log"; fail "fp32 ($lib) resume failed"; }
  grep -Eq "^fp32_gemm = \"$lib\" +# auto: " "$dir/config.toml" || { cat "$dir/config.toml"; fail "the auto resume of a $lib run did not keep $lib"; }
  ! grep -q "not bit for bit" "${dir}2.log" || { cat "${dir}2.log"; fail "the auto resume of a $lib run warned of another fp32 library"; }
  cmp "$whole/final/model.safetensors" "$dir/final/model.safetensors" || fail "fp32 ($lib): resumed weights differ from the uninterrupted run"
}
mpi "$joule" train --config run.toml --run-dir f --precision fp32 "${blas[@]}" > f.log 2>&1 || { cat f.log; fail "fp32 training failed"; }
grep -q "^precision fp32 (as set)" f.log || fail "no precision line for --precision fp32"
fp32_resume_keeps blas f g
# The same from a run on oneDNN, where this joule has it and its products agree with the BLAS's here.
if mpi "$joule" train --config run.toml --run-dir i --precision fp32 --set train.fp32_gemm=onednn > i.log 2>&1; then
  fp32_resume_keeps onednn i j
else
  grep -Eq 'built without oneDNN|oneDNN.s fp32 products differ' i.log || { cat i.log; fail "fp32 training on oneDNN failed"; }
  echo "(no oneDNN fp32 here: $(grep -o 'train.fp32_gemm is .*' i.log | head -1))"
fi
JOULE_CPU_ISA=avx2,fma,avx512f mpi -x JOULE_CPU_ISA "$joule" train --config run.toml --run-dir h "${blas[@]}" > h.log 2>&1 || { cat h.log; fail "forced-ISA run failed"; }
grep -q "^precision auto -> fp32: this CPU (avx2 fma avx512f) has neither AVX512-BF16 nor AMX-BF16" h.log || { cat h.log; fail "auto without bf16 instructions did not pick fp32"; }
cmp f/final/model.safetensors h/final/model.safetensors || fail "auto on a CPU without bf16 did not compute what --precision fp32 does"
if [[ $auto_precision == bf16 ]]; then
  ! cmp -s f/final/model.safetensors a/final/model.safetensors || fail "bf16 and fp32 runs gave identical weights: was bf16 used at all?"
fi

echo "== 2b. accounting across the resumes: three segments, totals = their sum, one emissions.csv row each"
python3 - <<'PY2' || fail "the summary does not account for every segment"
import csv, json
s = json.load(open("b/summary.json"))
segs = s["segment_list"]
assert [g["status"] for g in segs] == ["preempted", "preempted", "finished"], [g["status"] for g in segs]
assert segs[0]["end_step"] == 23 and segs[1]["start_step"] == 23 and segs[1]["end_step"] == 31, segs
assert segs[2]["start_step"] == 31 and s["schema_version"] == 4, (segs, s.get("schema_version"))
# Memory per rank: every rank's peak resident set (ru_maxrss) and the optimizer state (optimizer.shard auto: zero1 for
# 2 ranks on CPUs).
m = s["memory"]
assert m["optimizer_shard"] == "zero1" and 0 < m["peak_rss_bytes_min_rank"] <= m["peak_rss_bytes_max_rank"], m
assert m["optimizer_state_bytes_per_rank"] > 0, m
close = lambda a, b: abs(a - b) <= 1e-9 * max(1.0, abs(b))
# Throughput over the whole run, not its last segment: every segment's timed sequences (after its own warm-up of 2
# steps) over their timed seconds; MFU is the same rate against the peak.
timed_sequences, timed_s = sum(g["timed_sequences"] for g in segs), sum(g["timed_s"] for g in segs)
assert [g["timed_sequences"] for g in segs] == [(23 - 2) * 32, (31 - 23 - 2) * 32, (40 - 31 - 2) * 32], segs
assert (s["timed_sequences"], s["timed_s"]) == (timed_sequences, timed_s), s
assert close(s["seq_per_s"], timed_sequences / timed_s), (s["seq_per_s"], timed_sequences / timed_s)
last = [r for r in map(json.loads, open("b/metrics.jsonl")) if "seq_per_s" in r][-1]
assert close(last["seq_per_s"], s["seq_per_s"]), (last["seq_per_s"], s["seq_per_s"])
assert s["mfu"] is None or close(s["mfu"] / s["seq_per_s"], last["mfu"] / last["seq_per_s"]), (s["mfu"], last["mfu"])
for k in ("facility_kwh", "usd", "co2_kg"):
    total = {"facility_kwh": s["energy_kwh"], "usd": s["cost_usd"], "co2_kg": s["co2_kg"]}[k]
    assert close(total, sum(g["figures"][k] for g in segs)), (k, total)
assert s["energy_kwh"] > 0 and s["cost_usd"] > 0 and s["co2_kg"] > 0, s
assert s["energy_source"] == "model" and s["instance"]["instance"] == "cpu-host", s["energy_source"]
assert s["projection"]["history"], "no projection history"
# The run reached its target: that projection is what it spent. A full pretraining's 450M sequences: from the rates alone
# (450M / seq_per_s of wall time at the average power and cost rate), nothing spent added.
t, c = s["projection"]["target"], s["projection"]["full_pretraining_450M"]
assert close(t["wall_s"], s["billed_wall_s"]) and close(t["kwh"], s["energy_kwh"]) and close(t["usd"], s["cost_usd"]), t
full_wall = c["sequences"] / s["seq_per_s"]
assert close(c["wall_s"], full_wall), (c, full_wall)
assert close(c["kwh"], s["energy_kwh"] / s["billed_wall_s"] * full_wall), c
assert close(c["usd"], s["cost_usd"] / s["billed_wall_s"] * full_wall), c
rows = list(csv.DictReader(open("b/emissions.csv")))
assert len(rows) == 3 and {r["run_id"] for r in rows} == {s["run_id"]}, rows
assert close(sum(float(r["energy_consumed"]) for r in rows), s["energy_kwh"])
m = [json.loads(l) for l in open("b/metrics.jsonl")]
assert all("energy_kwh" in r and "cost_usd" in r and "power_w" in r for r in m if "loss" in r)
print("segments", len(segs), "| kWh", s["energy_kwh"], "| USD", s["cost_usd"], "| kg CO2", s["co2_kg"])
PY2
# The logs the field's tools read: one TensorBoard event file per segment, one MLPerf-style log for the run. With
# tbparse and mlperf-logging installed (not in CI), a real reader and the real checker read them.
[[ $(ls b/tb | grep -c "^events.out.tfevents.") -eq 3 ]] || { ls -l b/tb; fail "not one TensorBoard event file per segment"; }
[[ $(grep -c "^:::MLLOG .*\"key\":\"run_start\"" b/mllog.txt) -eq 1 && $(grep -c "\"key\":\"run_stop\"" b/mllog.txt) -eq 1 ]] ||
  { cat b/mllog.txt; fail "mllog.txt: not one run_start and one run_stop over three segments"; }
if python3 -c "import tbparse" 2> /dev/null; then
  python3 "$here/../../tools/check/tb_events.py" b | tail -n 1 | grep -q "tensorboard check: ok" || fail "tools/check/tb_events.py b"
else
  echo "   (tbparse not installed: tools/check/tb_events.py skipped)"
fi
if python3 -c "import mlperf_logging" 2> /dev/null; then
  python3 "$here/../../tools/check/mlperf.py" b > mlperf_check.txt || { cat mlperf_check.txt; fail "tools/check/mlperf.py b"; }
else
  echo "   (mlperf-logging not installed: tools/check/mlperf.py skipped)"
fi
"$joule" summary b > summary.txt 2>&1 || { cat summary.txt; fail "joule summary failed"; }
grep -q "segment 3 .*steps 31-40, .* seq/s" summary.txt || { cat summary.txt; fail "joule summary does not list the segments"; }
grep -q "throughput (all segments' timed steps)" summary.txt && grep -q "time outside timed steps .*in each of 3 segments" summary.txt ||
  { cat summary.txt; fail "joule summary does not say what its throughput covers"; }

echo "== 2d. --resume auto on a finished run: nothing to do, nothing written; with --steps raised it continues"
e2e_snapshot before_finished.txt
mpi "$joule" train --config run.toml --run-dir b --resume auto > b4.log 2>&1 || { cat b4.log; fail "resume of a finished run failed"; }
grep -q "^b: the run finished at step 40 (b/summary.json); nothing to do, nothing written" b4.log || { cat b4.log; fail "no 'finished' line"; }
e2e_snapshot after_finished.txt
diff <(grep -v "b4.log\|before_finished" before_finished.txt) <(grep -v "b4.log\|before_finished\|after_finished" after_finished.txt) ||
  fail "a resume of a finished run wrote something"
cp -r b b_more
mpi "$joule" train --config run.toml --run-dir b_more --resume auto --steps 44 --set optimizer.lr=0.02 --data ./shards/train/ > b5.log 2>&1 ||
  { cat b5.log; fail "continuing a finished run failed"; }
grep -q "^continuing the finished run b_more from step 40 to step 44$" b5.log || { cat b5.log; fail "no 'continuing' line"; }
# The config's changes, each with both values and whether the run stays the same; the data path spelled otherwise is
# not one.
grep -q "^note: resuming with train.steps = 44 (the checkpoint's: 40): the run's length" b5.log &&
  grep -q "^warning: resuming with optimizer.lr = 0.02 (the checkpoint's: 0.01): changes the training from here on" b5.log &&
  ! grep -q "data.train" b5.log || { cat b5.log; fail "the config's changes are not named key by key"; }
python3 - <<'PY3' || fail "the continued run's records"
import json
steps = [r["step"] for r in map(json.loads, open("b_more/metrics.jsonl")) if "seq_per_s" in r]
assert steps == sorted(set(steps)) and steps[-1] == 44, steps  # no step logged twice
s = json.load(open("b_more/summary.json"))
assert s["steps"] == 44 and s["segments"] == 4 and s["segment_list"][-1]["start_step"] == 40, s["segment_list"]
# The MLPerf log has one run_stop (the continuation dropped the earlier close) at the continued run's samples.
keys = [json.loads(line[9:]) for line in open("b_more/mllog.txt")]
stops = [k for k in keys if k["key"] == "run_stop"]
assert len(stops) == 1 and stops[0]["metadata"]["samples_count"] == s["sequences"], stops
PY3

echo "== 2f. RUN/config.toml: what the run used, automatic keys with their source; given back, it repeats the run"
grep -q "^global_batch = 32  # auto: micro_batch 8 x accumulation 2 x 2 rank(s)$" a/config.toml &&
  grep -Eq "^threads = [0-9]+  # auto: " a/config.toml && grep -q "^precision = \"$auto_precision\"  # auto: " a/config.toml &&
  grep -q "^price_per_hour = 0.085  # auto: USD per instance-hour, profile cpu-host.toml$" a/config.toml &&
  grep -q "^pue = 1.58  # auto: profile cpu-host.toml$" a/config.toml &&
  grep -q "^grid_intensity = 475.0  # auto: g CO2/kWh, grid-intensity.toml region world$" a/config.toml ||
  { cat a/config.toml; fail "config.toml does not hold the values the run used"; }
! grep -q "resolved config\|^\[accounting\]" a.log || fail "the terminal shows the whole config (it belongs in config.toml)"
mpi "$joule" train --config a/config.toml --run-dir a_again > a_again.log 2>&1 || { cat a_again.log; fail "a run from a/config.toml"; }
cmp a/final/model.safetensors a_again/final/model.safetensors || fail "a/config.toml given back did not repeat the run"
# Resumed with its own config.toml (values where the checkpoint's config says auto), a run notes only the real changes
# (the copy's run.dir, the steps).
cp -r b b_file
mpi "$joule" train --config b/config.toml --run-dir b_file --resume auto --steps 42 > b_file.log 2>&1 || { cat b_file.log; fail "resume with b/config.toml"; }
[[ $(grep -c "resuming with" b_file.log) -eq 2 ]] && grep -q "^note: resuming with train.steps = 42 " b_file.log &&
  grep -q "^note: resuming with run.dir = \"b_file\" " b_file.log ||
  { cat b_file.log; fail "a resume with the run's own config.toml reported changes that are none"; }
# A value set now where the checkpoint's run left the key automatic is a change when it differs from what auto gave.
cp -r b b_gb
mpi "$joule" train --config run.toml --run-dir b_gb --resume auto --steps 42 --set train.global_batch=64 > b_gb.log 2>&1 ||
  { cat b_gb.log; fail "resume with another global batch"; }
grep -q "^warning: resuming with train.global_batch = 64 (the checkpoint's: 32): changes the training" b_gb.log ||
  { cat b_gb.log; fail "a global batch set against the checkpoint's automatic one went unreported"; }

echo "== 2e. --data D (a data create output): D's eval/ is the held-out set whatever the config's data.eval says"
sed 's|^eval = "shards/eval"|eval = "elsewhere/eval"|' run.toml > run_elsewhere.toml
mpi "$joule" train --config run_elsewhere.toml --run-dir dd --data shards --steps 2 > dd.log 2>&1 || { cat dd.log; fail "--data shards with the config's eval elsewhere"; }
grep -q "^data: training shards/train ([0-9]* shard(s), [0-9]* sequences, shuffled in blocks of 64 rows), eval shards/eval (1 shard(s), [0-9]* sequences)$" dd.log ||
  { cat dd.log; fail "the resolved data pair is not D's"; }
grep -q "energy (facility, PUE 1.58)" summary.txt || fail "no facility energy line"

echo "== 2c. joule report renders in headless Chromium"
"$joule" report b --out report.html > report.log 2>&1 || { cat report.log; fail "joule report failed"; }
command -v chromium >/dev/null || fail "chromium not installed (bash tools/setup.sh installs it)"
browser() { HOME="$PWD" timeout 120 chromium --headless --no-sandbox --disable-gpu --hide-scrollbars "$@" 2>/dev/null; }
browser --window-size=1340,2600 --screenshot="$PWD/report.png" "file://$PWD/report.html" >/dev/null || fail "chromium could not render the report"
browser --dump-dom "file://$PWD/report.html" > report.dom || fail "chromium could not load the report"
svgs=$(grep -o "<svg" report.dom | wc -l)
(( svgs >= 8 )) || fail "the rendered report holds $svgs SVG charts, expected at least 8"
for title in "Loss over sequences" "Masked-LM accuracy over sequences" "Throughput over time" "Energy by component and source" "p4d.24xlarge" "trn1.32xlarge"; do
  grep -q "$title" report.dom || fail "the rendered report lacks '$title'"
done
bash "$here/report_layout.sh" report.html || fail "the report's charts have overlapping or cut-off labels (above)"
! grep -q "e+0" report.html || fail "the report shows a number in exponent form: $(grep -o '[0-9.]*e+0[0-9]' report.html | head -3)"
echo '<!DOCTYPE html><html><body></body></html>' > blank.html
browser --window-size=800,600 --screenshot="$PWD/blank.png" "file://$PWD/blank.html" >/dev/null
python3 - "$here" <<'PY2' || fail "the report screenshot is blank"
import json, subprocess, sys
stats = lambda f: json.loads(subprocess.check_output([sys.executable, sys.argv[1] + "/png_stats.py", f]))
report, blank = stats("report.png"), stats("blank.png")
print("report.png", report, "| blank.png", blank)
assert blank["non_white_fraction"] == 0, "the control screenshot is not blank: the check would not notice"
assert report["non_white_fraction"] > 0.02 and report["distinct_colors"] > 50, report
PY2

echo "== 3. SIGTERM to one rank"
mpi "$joule" train --config run.toml --run-dir c --steps 400 > c.log 2>&1 &
launcher=$!
for _ in $(seq 1 600); do grep -q "^step 10/" c.log 2>/dev/null && break; sleep 0.1; done
grep -q "^step 10/" c.log || { cat c.log; fail "no 'step 10/' progress line within 60 s"; }
victim=$(e2e_rank_pid " train --config run.toml --run-dir c" 1)
[[ -n "$victim" ]] || { cat c.log; fail "no process of rank 1 to signal (the run ended too early?)"; }
[[ $(tr '\0' ' ' < /proc/$victim/cmdline) == *" train --config"* && $(cat /proc/$victim/comm) != mpirun ]] ||
  fail "process $victim is not a joule rank"
kill -TERM "$victim"
set +e
wait $launcher
rc=$?
set -e
[[ $rc -eq 75 ]] || { cat c.log; fail "SIGTERM exit code $rc, expected 75"; }
ls c/checkpoints | grep -q step_ || fail "no checkpoint after SIGTERM"
grep -q "preempted (signal)" c.log || fail "no preemption notice"
# Both ranks stopped with 75 at the same boundary: rank 0 (which was not signalled) saved the checkpoint too.
grep -q "checkpoint c/checkpoints/step_" c.log || { cat c.log; fail "no checkpoint line from rank 0"; }

echo "== 4. corrupt newest checkpoint"
newest=$(ls -d a/checkpoints/step_* | sort | tail -1)
previous=$(ls -d a/checkpoints/step_* | sort | tail -2 | head -1)
printf 'garbage' | dd of="$newest/model.safetensors" bs=1 seek=4096 conv=notrunc 2>/dev/null
# Directories of the user's own under checkpoints/, complete and "newer" by name: never resumed from or pruned.
cp -r "$previous" a/checkpoints/step_99999999_best && cp -r "$previous" a/checkpoints/zz_mine
mpi "$joule" train --config run.toml --run-dir a --steps 45 --resume auto > a2.log 2>&1 || { cat a2.log; fail "resume after corruption failed"; }
grep -q "warning: ignoring a/checkpoints/step_99999999_best: not a name joule gives a checkpoint" a2.log || { cat a2.log; fail "a user's directory was not mentioned"; }
[[ -d a/checkpoints/step_99999999_best && -d a/checkpoints/zz_mine ]] || fail "a user's directory under checkpoints/ was removed"
grep -q "skipping checkpoint $newest: model.safetensors does not have the checksum the manifest records" a2.log || { cat a2.log; fail "no warning about the corrupt checkpoint"; }
grep -q "resumed from $previous" a2.log || fail "did not fall back to $previous"

echo "== 5. export = final weights; resume on another world size"
"$joule" export --checkpoint b --out exported > export.log 2>&1 || { cat export.log; fail "export failed"; }
cmp exported/model.safetensors b/final/model.safetensors || fail "the exported newest checkpoint differs from final/"
"$mpiexec" -n 1 --allow-run-as-root --bind-to none -x OMP_NUM_THREADS=1 "$joule" train --config run.toml --run-dir c --steps 400 \
  --set train.global_batch=32 --set train.steps=$(( $(ls c/checkpoints | sort | tail -1 | sed 's/step_0*//') + 3 )) --resume auto > c2.log 2>&1 \
  || { cat c2.log; fail "resume on 1 rank failed"; }
grep -q "note: resuming on 1 ranks a run saved on 2" c2.log || fail "no world-size change note"
grep -q "global batch 32 = 8 x 4 x 1" c2.log || fail "accumulation did not follow the global batch"

echo "== 6. config errors"
set +e
out=$("$joule" train --config run.toml --set train.global_batch=30 2>&1); rc=$?
set -e
[[ $rc -ne 0 ]] && grep -q "train.global_batch 30 is not divisible by train.micro_batch 8" <<<"$out" || fail "bad global batch: $out"
echo "== 7. --device trainium-sim: the same weights as cpu, plus a simulated trn1 (and p4d) cluster clock"
mpi "$joule" train --config run.toml --run-dir s --device trainium-sim > s.log 2>&1 || { cat s.log; fail "trainium-sim run failed"; }
cmp b/final/model.safetensors s/final/model.safetensors || fail "trainium-sim changed the numerics (weights differ from the cpu run)"
grep -q "SIMULATED throughput" s.log || { cat s.log; fail "no simulated figures in the summary"; }
grep -q "SIMULATED basis .*applied unchanged to bert-tiny" s.log || { cat s.log; fail "the SIMULATED block does not say its efficiency is applied to bert-tiny as is"; }
mpi "$joule" train --config run.toml --run-dir s2 --device trainium-sim --sim-instance p4d.24xlarge --sim-nodes 4 > s2.log 2>&1 \
  || { cat s2.log; fail "trainium-sim run with a GPU cluster failed"; }
python3 - <<'PY2' || fail "simulated figures"
import json
for d, inst, nodes, devices in (("s", "trn1.32xlarge", 16, 256), ("s2", "p4d.24xlarge", 4, 32)):
    m = json.load(open(d + "/summary.json"))["simulated"]
    assert m["instance"] == inst and m["nodes"] == nodes and m["devices"] == devices, m
    assert m["global_batch"] == 8 * 2 * devices, m          # micro-batch x accumulation per simulated device
    assert m["step_s"] >= m["compute_s"] and m["step_s"] >= m["exposed_comm_s"] and m["seq_per_hour"] > 0, m
    assert abs(m["clock_s"] - 40 * m["step_s"]) < 1e-9 * m["clock_s"], m
    assert "not measured" in m["label"]
    rows = [json.loads(l) for l in open(d + "/metrics.jsonl")]
    assert all(r["sim"]["instance"] == inst for r in rows if "loss" in r)
    print(d, inst, "x", nodes, "| step", round(m["step_s"], 6), "s | seq/hour", round(m["seq_per_hour"]))
PY2

echo "== 8. SIGTERM to launch/mpirun.sh: every rank checkpoints and the launcher exits 75 (what a scheduler requeues on)"
# (`|| echo $?`: under set -e a bare failing command would end the subshell before it records the code.)
(bash "$here/../../launch/mpirun.sh" -n 2 -- "$joule" train --config run.toml --run-dir w --steps 400 > w.log 2>&1 && echo 0 > w.rc ||
  echo $? > w.rc) &
for _ in $(seq 1 600); do grep -q "^step 10/" w.log 2>/dev/null && break; sleep 0.1; done
grep -q "^step 10/" w.log || { cat w.log; fail "no 'step 10/' progress line within 60 s under launch/mpirun.sh"; }
pkill -TERM -f "launch/mpirun.sh -n 2 -- $joule train --config run.toml --run-dir w"
for _ in $(seq 1 600); do [[ -s w.rc ]] && break; sleep 0.1; done
[[ "$(cat w.rc 2>/dev/null)" == 75 ]] || { cat w.log; fail "launch/mpirun.sh exited $(cat w.rc 2>/dev/null) after SIGTERM, not 75"; }
ls w/checkpoints/step_* > /dev/null 2>&1 || fail "no checkpoint after SIGTERM to launch/mpirun.sh"

echo "== 8a. a joule error under launch/mpirun.sh is the last thing printed: Open MPI's abort banner left out"
set +e
bash "$here/../../launch/mpirun.sh" -n 2 -- "$joule" train --config run.toml --run-dir q --data no_such_shards > q.out 2> q.err
rc=$?
set -e
[[ $rc -eq 1 ]] || { cat q.err; fail "launch/mpirun.sh with a joule error exited $rc, not 1"; }
tail -n 2 q.err | head -n 1 | grep -q "joule train: error: no_such_shards: no such shard directory" &&
  tail -n 1 q.err | grep -q "what to do: " && ! grep -q "MPI_ABORT\|Primary job" q.err ||
  { cat q.err; fail "the joule error is not the last thing launch/mpirun.sh prints"; }

echo "== 9. the oversubscription warning: none for mpirun's default binding (a core per rank) or --bind-to none"
if (( $(nproc) >= 2 )); then
  for binding in "" "--bind-to none"; do
    # shellcheck disable=SC2086  # $binding is zero or two words
    "$mpiexec" -n 2 --allow-run-as-root $binding "$joule" train --config run.toml --run-dir bind --set train.steps=2 > bind.log 2>&1 ||
      { cat bind.log; fail "mpirun -n 2 ${binding:-(default binding)} failed"; }
    ! grep -q "oversubscribe" bind.log || { cat bind.log; fail "a false oversubscription warning under mpirun -n 2 ${binding:-(default binding)}"; }
    rm -rf bind
  done
else
  echo "   skipped: $(nproc) core(s), the case needs 2"
fi
"$mpiexec" -n $(( $(nproc) * 2 )) --oversubscribe --allow-run-as-root "$joule" train --config run.toml --run-dir over --set train.steps=2 \
  --set train.global_batch=$(( $(nproc) * 16 )) > over.log 2>&1 || { cat over.log; fail "an oversubscribed run failed"; }
grep -q "$(( $(nproc) * 2 )) rank(s) x 1 thread(s) on this node oversubscribe its $(nproc) core(s)" over.log ||
  { cat over.log; fail "no warning for twice as many ranks as cores"; }
echo "PASS"
