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
    impl = r["impl"] if r["impl"] == "joule" else "pytorch"
    key = (r["model"], f'{r["ranks"]}x{r["threads"]}', r.get("precision", "fp32"))
    groups.setdefault(key, {}).setdefault(impl, []).append(r)
torch_versions = sorted({r["torch"] for r in rows if "torch" in r})
print(f'{"model":<11} {"ranks x threads":<16} {"precision":<10} {"joule seq/s":>12} {"PyTorch seq/s":>14} {"ratio":>7} {"roofline":>9} {"joule RSS GiB":>14} {"PyTorch RSS GiB":>16} {"RSS/expected":>13} {"exposed comm s":>15} {"runs":>6}')
worst = None
joule_median = {}
for (model, layout, precision), g in sorted(groups.items()):
    j, p = g.get("joule", []), g.get("pytorch", [])
    if j:
        joule_median[(model, layout, precision)] = statistics.median(x["seq_per_s"] for x in j)
    if not j or not p:
        print(f"{model:<11} {layout:<16} {precision:<10} only {'joule' if j else 'PyTorch'} ran: no ratio")
        continue
    js, ps = statistics.median(x["seq_per_s"] for x in j), statistics.median(x["seq_per_s"] for x in p)
    ratio = js / ps
    worst = ratio if worst is None else min(worst, ratio)
    roof = statistics.median(x["roofline_fraction"] for x in j)
    print(f'{model:<11} {layout:<16} {precision:<10} {js:>12.3f} {ps:>14.3f} {ratio:>7.2f} {roof:>9.2f} {max(x["peak_rss_bytes"] for x in j) / 2**30:>14.2f} '
          f'{max(x["peak_rss_bytes"] for x in p) / 2**30:>16.2f} {statistics.median(x["rss_over_expected"] for x in j):>13.2f} '
          f'{statistics.median(x["exposed_comm_s"] for x in j):>15.2f} {f"{len(j)}/{len(p)}":>6}')
for (model, layout, precision), js in sorted(joule_median.items()):
    if precision == "bf16" and (model, layout, "fp32") in joule_median:
        print(f"joule bf16 / fp32, {model} {layout}: {js / joule_median[(model, layout, 'fp32')]:.2f}")
print(f"medians over the runs (joule/PyTorch); PyTorch {', '.join(torch_versions) or '?'}; results in {', '.join(args)}")
if min_ratio > 0 and worst is not None and worst < min_ratio:
    print(f"FAIL: the lowest ratio {worst:.2f} is below --min-ratio {min_ratio}")
    sys.exit(1)
