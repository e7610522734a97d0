#!/usr/bin/python3
"""Where a training step's (or an inference call's) time goes, per operator: sums the self time (an op's duration minus
the ops it called) of every event in a Chrome trace written by `joule bench train --profile FILE` or `joule bench
infer --batches B --profile FILE` (--steps: its JSON's "calls"), and groups the GEMMs.

  /usr/bin/python3 tools/bench/op_profile.py trace.json [--steps N] [--top 25] [--step-seconds S]
"""
import argparse
import collections
import json

# joule's bf16 Linear layers (models/bf16_linear.h), and its fp32 ones and attention products (models/fp32_gemm.h),
# are GEMMs with their epilogue (bias, GELU, the sum into .grad); their backward's bias-gradient sum, weight cast and
# copies in are ops of their own. Inference's feed-forward block counts as its GEMMs (its GELU pass is joule::gelu,
# apart), the attention's batched products too.
GEMM = {"aten::addmm", "aten::mm", "aten::bmm", "aten::baddbmm", "aten::addbmm", "joule::bf16_linear",
        "joule::bf16_linear_gelu", "joule::bf16_linear_backward", "joule::bf16_feed_forward",
        "joule::bf16_batched_matmul", "joule::fp32_linear", "joule::fp32_linear_backward",
        "joule::fp32_batched_matmul", "joule::fp32_batched_matmul_backward"}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--steps", type=int, default=1, help="timed steps in the trace (to print per-step times)")
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--step-seconds", type=float, default=0.0,
                    help="the measured step time (bench train's step_s): also prints the time outside every op")
    a = ap.parse_args()
    data = json.load(open(a.trace))
    events = data["traceEvents"] if isinstance(data, dict) else data
    by_thread = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X" and "dur" in e:
            by_thread[e.get("tid")].append(e)
    self_time, calls = collections.Counter(), collections.Counter()
    for evs in by_thread.values():
        evs.sort(key=lambda e: (e["ts"], -e["dur"]))
        stack = []  # [event, children's time]
        for e in evs:
            while stack and stack[-1][0]["ts"] + stack[-1][0]["dur"] <= e["ts"]:
                done, child = stack.pop()
                self_time[done["name"]] += done["dur"] - child
            if stack:
                stack[-1][1] += e["dur"]
            stack.append([e, 0.0])
            calls[e["name"]] += 1
        while stack:
            done, child = stack.pop()
            self_time[done["name"]] += done["dur"] - child
    total = sum(self_time.values())
    gemm = sum(t for n, t in self_time.items() if n in GEMM)
    print(f"{'op':<44} {'calls':>7} {'self ms/step':>13} {'share':>7}")
    for name, t in self_time.most_common(a.top):
        print(f"{name[:44]:<44} {calls[name] // a.steps:>7} {t / 1000 / a.steps:>13.1f} {100 * t / total:>6.1f}%")
    print(f"{'all ops':<44} {'':>7} {total / 1000 / a.steps:>13.1f}  GEMMs (addmm, mm, bmm, joule's own GEMMs) {100 * gemm / total:.1f}%")
    if a.step_seconds > 0:
        outside = a.step_seconds * 1000 - total / 1000 / a.steps
        print(f"{'outside any op (waits, glue)':<44} {'':>7} {outside:>13.1f}  of a {a.step_seconds * 1000:.0f} ms step: "
              f"GEMMs are {100 * gemm / 1000 / a.steps / (a.step_seconds * 1000):.1f}% of the step")


if __name__ == "__main__":
    main()
