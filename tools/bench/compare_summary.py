#!/usr/bin/env python3
# The table compare_pytorch.sh prints, from one or more of its JSON-lines result files (runs of several
# invocations pool: medians per model and layout).
#   python3 tools/bench/compare_summary.py [--min-ratio R] results.jsonl [more.jsonl ...]
import json, statistics, sys
args = sys.argv[1:]
min_ratio = 0.0
if len(args) >= 2 and args[0] == "--min-ratio":
    min_ratio = float(args[1])
    args = args[2:]
if not args:
    sys.exit("usage: compare_summary.py [--min-ratio R] results.jsonl [more.jsonl ...]")
rows = [json.loads(l) for f in args for l in open(f) if l.strip()]
groups = {}
for r in rows:
    impl = "joule" if r["impl"] == "joule" else "PyTorch " + r.get("torch", "?").split("+")[0]
    key = (r["model"], f'{r["ranks"]}x{r["threads"]}', r.get("precision", "fp32"))
    groups.setdefault(key, {}).setdefault(impl, []).append(r)
print(f'{"model":<11} {"ranks x threads":<16} {"precision":<10} {"joule seq/s":>12} {"against":<16} {"its seq/s":>10} {"ratio":>7} {"roofline":>9} {"joule RSS GiB":>14} {"its RSS GiB":>12} {"RSS/expected":>13} {"exposed comm s":>15} {"runs":>6}')
worst = None
joule_median = {}
for (model, layout, precision), g in sorted(groups.items()):
    j = g.get("joule", [])
    others = sorted(k for k in g if k != "joule")
    if not j or not others:
        print(f"{model:<11} {layout:<16} {precision:<10} only {'joule' if j else ', '.join(others)} ran: no ratio")
        continue
    js = statistics.median(x["seq_per_s"] for x in j)
    joule_median[(model, layout, precision)] = js
    roof = statistics.median(x["roofline_fraction"] for x in j)
    for other in others:
        p = g[other]
        ps = statistics.median(x["seq_per_s"] for x in p)
        ratio = js / ps
        worst = ratio if worst is None else min(worst, ratio)
        print(f'{model:<11} {layout:<16} {precision:<10} {js:>12.3f} {other:<16} {ps:>10.3f} {ratio:>7.2f} {roof:>9.2f} {max(x["peak_rss_bytes"] for x in j) / 2**30:>14.2f} '
              f'{max(x["peak_rss_bytes"] for x in p) / 2**30:>12.2f} {statistics.median(x["rss_over_expected"] for x in j):>13.2f} '
              f'{statistics.median(x["exposed_comm_s"] for x in j):>15.2f} {f"{len(j)}/{len(p)}":>6}')
for (model, layout, precision), js in sorted(joule_median.items()):
    if precision == "bf16" and (model, layout, "fp32") in joule_median:
        print(f"joule bf16 / fp32, {model} {layout}: {js / joule_median[(model, layout, 'fp32')]:.2f}")
print(f"medians over the runs; results in {', '.join(args)}")
if min_ratio > 0 and worst is not None and worst < min_ratio:
    print(f"FAIL: the lowest ratio {worst:.2f} is below --min-ratio {min_ratio}")
    sys.exit(1)
