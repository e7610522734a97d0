#!/usr/bin/env python3
"""One JSON line describing the machine a benchmark runs on, written first in every raw result file under
tools/bench/results/ (tools/bench/tables.py prints it above each table): processor, vCPUs, memory, the vector and
matrix extensions the kernel reports, the OpenBLAS core type the environment forces (if any), the Debian packages the
figures depend on, joule's commit and the date.

    python3 tools/bench/bench_env.py [--note TEXT]
"""
import argparse
import datetime
import json
import os
import platform
import subprocess


def run(*cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True, check=False).stdout.strip()
    except OSError:
        return ""


def cpu():
    model, flags = "?", set()
    with open("/proc/cpuinfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    wanted = ["avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"]
    return model, [f for f in wanted if f in flags]


def packages():
    names = ["libtorch-dev", "python3-torch", "libopenblas0-pthread", "openmpi-bin", "libhdf5-dev", "g++"]
    out = run("dpkg-query", "-W", "-f=${Package} ${Version}\n", *names)
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--note", default="")
    a = ap.parse_args()
    model, isa = cpu()
    with open("/proc/meminfo") as f:
        mem_kb = int(next(line.split()[1] for line in f if line.startswith("MemTotal:")))
    here = os.path.dirname(os.path.abspath(__file__))
    commit = run("git", "-C", here, "rev-parse", "--short", "HEAD")
    dirty = bool(run("git", "-C", here, "status", "--porcelain", "--untracked-files=no"))
    print(json.dumps({
        "record": "environment",
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "joule_commit": commit + ("+changes" if dirty else ""),
        "cpu_model": model,
        "vcpus": os.cpu_count(),
        "memory_gib": round(mem_kb / 2**20, 1),
        "cpu_isa": isa,
        "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", ""),
        "kernel": platform.release(),
        "os": run("sh", "-c", ". /etc/os-release && echo $PRETTY_NAME"),
        "packages": packages(),
        "note": a.note,
    }))


if __name__ == "__main__":
    main()
