#!/usr/bin/env python3
"""Reads a run's TensorBoard event files (RUN/tb/) with a real reader and checks them against RUN/metrics.jsonl.

    python3 tools/check/tb_events.py RUN [RUN ...]     (named so, not tensorboard.py: that would shadow the package)

Needs `tbparse` and `tensorboard` from PyPI (pip install tbparse tensorboard; not needed to build or test joule, so
kept out of CI). For each run: every tag's steps are unique, the train/* and perf/* scalars are the metrics.jsonl
rows' figures (to float32 rounding), the eval/* scalars are its eval rows', and the steps cover every logged step.
Prints one line per tag; exits 1 on the first disagreement, naming the run, tag and step.
"""
import json
import math
import os
import sys

from tbparse import SummaryReader

# tag -> (key in a metrics.jsonl training row, or in its "eval" object)
TRAIN = {"train/loss": "loss", "train/mlm_loss": "mlm_loss", "train/nsp_loss": "nsp_loss",
         "train/mlm_accuracy": "mlm_acc", "train/learning_rate": "lr", "train/grad_norm": "grad_norm",
         "perf/seq_per_s": "seq_per_s", "perf/mfu": "mfu", "energy/power_w": "power_w",
         "energy/facility_kwh": "energy_kwh", "cost/usd": "cost_usd", "co2/kg": "co2_kg"}
EVAL = {"eval/loss": "loss", "eval/mlm_loss": "mlm_loss", "eval/nsp_loss": "nsp_loss",
        "eval/mlm_accuracy": "mlm_accuracy", "eval/nsp_accuracy": "nsp_accuracy"}


def fail(msg):
    print("FAIL: " + msg)
    sys.exit(1)


def check(run):
    rows = [json.loads(line) for line in open(os.path.join(run, "metrics.jsonl"))]
    # The last row of a step wins (a resumed run logs again what it trains again).
    train = {r["step"]: r for r in rows if "seq_per_s" in r}
    evals = {r["step"]: r["eval"] for r in rows if "eval" in r}
    frame = SummaryReader(os.path.join(run, "tb")).scalars
    if frame.empty:
        fail(f"{run}/tb: no scalars")
    for tag, group in frame.groupby("tag"):
        steps = list(group["step"])
        if len(steps) != len(set(steps)):
            fail(f"{run}/tb {tag}: a step appears twice: {sorted(steps)}")
        expected = {s: r.get(TRAIN[tag]) for s, r in train.items()} if tag in TRAIN else \
            {s: e.get(EVAL[tag]) for s, e in evals.items()} if tag in EVAL else None
        if expected is None:
            fail(f"{run}/tb: unexpected tag {tag}")
        expected = {s: v for s, v in expected.items() if v is not None}
        if set(steps) != set(expected):
            fail(f"{run}/tb {tag}: steps {sorted(steps)}, metrics.jsonl has {sorted(expected)}")
        for step, value in zip(group["step"], group["value"]):
            want = expected[step]
            if not math.isclose(value, want, rel_tol=1e-6, abs_tol=1e-30):
                fail(f"{run}/tb {tag} step {step}: {value} in TensorBoard, {want} in metrics.jsonl")
        print(f"{run}/tb {tag}: {len(steps)} step(s) {min(steps)}-{max(steps)}, last {group['value'].iloc[-1]:.6g}: "
              f"as metrics.jsonl")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print(__doc__)
        sys.exit(2)
    for run_dir in sys.argv[1:]:
        check(run_dir)
    print("tensorboard check: ok")
