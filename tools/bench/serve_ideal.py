#!/usr/bin/env python3
"""The rate an ideal server would sustain within a p99 bound, from a closed loop's forward times (BENCHMARKS.md,
"Serving").

Reads `joule bench infer --json` (one line: the forward time of each batch size, back to back) on stdin and writes one
served run in `joule bench serve --json`'s shape: the same Poisson arrivals, one batch at a time taking what waits
when the last one ends (up to --max-batch; --max-queue-delay-ms for the oldest to wait for company), each batch of b
examples taking the closed loop's median time for b (linear between the batch sizes it measured), and nothing else:
no HTTP, no client on the same cores, no variance. Its highest rate within the bound is what queueing alone allows on
this host: a served rate compared with it measures the server, one compared with the closed loop also the queue.

    joule bench infer --model DIR --batches 1,2,4,8 --json | python3 tools/bench/serve_ideal.py [--max-batch 8] \
        [--max-queue-delay-ms 0] [--arrivals 100000] [--seed 1] [--rates 10,20]
"""
import argparse
import bisect
import json
import random
import sys

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--max-batch", type=int, default=8)
parser.add_argument("--max-queue-delay-ms", type=float, default=0)
parser.add_argument("--arrivals", type=int, default=100000, help="Poisson arrivals simulated per rate")
parser.add_argument("--seed", type=int, default=1)
parser.add_argument("--rates", default="", help="offered rates to simulate, comma-separated (default: search)")
args = parser.parse_args()

closed = json.loads(sys.stdin.read())
if closed.get("load", "closed") != "closed" or not closed.get("points"):
    sys.exit("serve_ideal.py: stdin is not a closed-loop `joule bench infer --json` line")
measured = sorted((p["batch"], p["p50_ms"]) for p in closed["points"])
if measured[0][0] != 1:
    sys.exit("serve_ideal.py: the closed loop has no batch 1 (give `--batches 1,...`)")
bound = closed["p99_bound_ms"]


def forward_ms(b):
    """The closed loop's median time of a batch of b examples, linear between (and beyond) its batch sizes."""
    for (b0, t0), (b1, t1) in zip(measured, measured[1:]):
        if b <= b1:
            return t0 + (t1 - t0) * (b - b0) / (b1 - b0)
    if len(measured) == 1:
        return measured[0][1] * b
    (b0, t0), (b1, t1) = measured[-2:]
    return t1 + (t1 - t0) * (b - b1) / (b1 - b0)


def simulate(rate):
    """One batch at a time: latencies (ms) of --arrivals Poisson arrivals at `rate` per second, and the mean batch."""
    rng = random.Random(args.seed)
    arrivals, t = [], 0.0
    for _ in range(args.arrivals):
        t += rng.expovariate(rate / 1e3)
        arrivals.append(t)
    free, i, latency, batches = 0.0, 0, [], 0
    n = len(arrivals)
    while i < n:
        start = max(free, arrivals[i])
        last = min(i + args.max_batch, n) - 1
        if args.max_queue_delay_ms > 0:  # the oldest waits for company unless the batch fills first
            start = max(start, min(arrivals[i] + args.max_queue_delay_ms, arrivals[last]))
        j = bisect.bisect_right(arrivals, start, i, last + 1)
        end = start + forward_ms(j - i)
        latency += [end - a for a in arrivals[i:j]]
        free, i, batches = end, j, batches + 1
    latency.sort()
    pick = lambda q: latency[min(len(latency) - 1, int(q * len(latency)))]  # noqa: E731
    return {"offered_per_s": rate, "inferences_per_s": len(latency) * 1e3 / max(free, arrivals[-1]),
            "mean_ms": sum(latency) / len(latency), "p50_ms": pick(0.50), "p90_ms": pick(0.90), "p99_ms": pick(0.99), "errors": 0,
            "batch": args.max_batch, "mean_batch": n / batches, "calls": batches}


# The highest rate whose p99 meets the bound: up to the closed loop's best throughput, by bisection.
capacity = max(p["batch"] * 1e3 / forward_ms(p["batch"]) for p in closed["points"])
low, high = 0.0, capacity
points = [simulate(float(r)) for r in args.rates.split(",")] if args.rates else []
for _ in range(0 if args.rates else 12):
    point = simulate((low + high) / 2)
    points.append(point)
    if point["p99_ms"] <= bound:
        low = point["offered_per_s"]
    else:
        high = point["offered_per_s"]
run = {k: closed[k] for k in ("architecture", "model", "precision", "seq_len", "p99_bound_ms", "threads", "date")
       if k in closed}
run.update({"impl": "ideal", "load": "served", "points": sorted(points, key=lambda p: p["offered_per_s"]),
            "forward_ms": dict((str(b), t) for b, t in measured), "arrivals_per_rate": args.arrivals})
print(json.dumps(run))
