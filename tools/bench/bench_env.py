#!/usr/bin/env python3
"""One JSON line describing the machine a benchmark runs on, written first in every raw result file under
tools/bench/results/ (tools/bench/tables.py prints it above each table): processor (its name, family and model),
vCPUs, memory, the vector and matrix extensions the kernel reports, the OpenBLAS core type the environment forces (if
any), the Debian packages the figures depend on, joule's commit and the date.

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
    """(model name, the wanted ISA flags present, "family F, model M"): a name such as "AMD EPYC" does not tell a Zen 4
    from a Zen 5; the family and model numbers do."""
    model, flags, numbers = "?", set(), {}
    with open("/proc/cpuinfo") as f:
        for line in f:
            key, _, value = line.partition(":")
            key = key.strip()
            if key == "model name":
                model = value.strip()
            elif key == "flags":
                flags = set(value.split())
            elif key in ("cpu family", "model") and key not in numbers:
                numbers[key] = value.strip()
    wanted = ["avx2", "fma", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16"]
    family = f'family {numbers["cpu family"]}, model {numbers["model"]}' if len(numbers) == 2 else ""
    return model, [f for f in wanted if f in flags], family


def packages():
    names = ["libtorch-dev", "python3-torch", "libopenblas0-pthread", "openmpi-bin", "libhdf5-dev", "g++"]
    out = run("dpkg-query", "-W", "-f=${Package} ${Version}\n", *names)
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--note", default="")
    a = ap.parse_args()
    model, isa, family = cpu()
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
        "cpu_family": family,
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
