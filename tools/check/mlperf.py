#!/usr/bin/env python3
"""Checks a run's MLPerf-style log (RUN/mllog.txt) with the `mlperf-logging` package's compliance checker.

    python3 tools/check/mlperf.py RUN

Needs `pip install mlperf-logging` (kept out of CI). Runs the checker's training rules of ruleset 4.1.0, the last
with BERT (MLPerf training retired it in 5.0), for the open division, in which joule's log places every run: the
rules check the keys and their order (submission_*, cache_clear, init_start/stop within the time allowed, run_start/
stop, block and eval intervals, eval_accuracy with its epoch number, the hyper-parameters BERT logs, exactly once
each). What does not apply to a run that is not a submission: the closed division's target accuracy (0.720) and the
review of the submission_* values. Prints the checker's verdict; exits with its code, or 1 when it warns that a key
required exactly once occurs otherwise (it reports that as a warning and still says SUCCESS).
"""
import os
import subprocess
import sys

if len(sys.argv) != 2:
    print(__doc__)
    sys.exit(2)
log = os.path.join(sys.argv[1], "mllog.txt")
if not os.path.isfile(log):
    print(f"FAIL: {log}: no such file (joule train writes it on rank 0)")
    sys.exit(1)
result = subprocess.run([sys.executable, "-m", "mlperf_logging.compliance_checker", "--usage", "training",
                         "--ruleset", "4.1.0", "--log_output", os.devnull, log], capture_output=True, text=True)
output = (result.stdout + result.stderr).strip()
print(output)
code = result.returncode
if code == 0 and "Required EXACTLY_ONE occurrence" in output:
    code = 1
print(f"mlperf compliance check of {log}: {'ok' if code == 0 else 'FAILED'}")
sys.exit(code)
