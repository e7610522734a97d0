#!/usr/bin/env python3
"""Inference throughput and latency of the same classifier in PyTorch eager (fp32, bf16 autocast), optionally
torch.compile (the same precisions, --impls ...,pytorch-compile) and ONNX Runtime (fp32, the model exported by torch.onnx),
alternated with `joule bench infer` on the same preset, batch sizes and
sequence length: one JSON line per (implementation, precision, batch) with inferences/s and p50/p99 latency.

Runs with pyenv's python3 (torch 2.x, transformers, onnxruntime from PyPI), outside CI:
    python3 tools/bench/infer_compare.py build/ci/tools/joule --model bert-base --batches 1,8,16 > infer.jsonl
and for the PyTorch 1.13 anchor with Debian's python3-torch and a transformers 4.x installed outside the repository:
    PYTHONPATH=/opt/tf4-py311 /usr/bin/python3 tools/bench/infer_compare.py build/ci/tools/joule --impls pytorch ...
Each PyTorch row carries its torch version (tools/bench/tables.py makes a column per major version).
The models are randomly initialised from configs/models/MODEL.json (throughput does not depend on the weights).
"""
import argparse
import inspect
import json
import os
import platform
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch
import transformers

HERE = os.path.dirname(os.path.abspath(__file__))


def hf_model(preset):
    with open(os.path.join(HERE, "..", "..", "configs", "models", preset + ".json")) as f:
        cfg = json.load(f)
    layout = cfg.get("model_type") == "layoutlm"
    cls = "LayoutLMForTokenClassification" if layout else "BertForSequenceClassification"
    config = (transformers.LayoutLMConfig if layout else transformers.BertConfig)(
        **{k: v for k, v in cfg.items() if k not in ("architectures", "model_type")}, num_labels=2)
    torch.manual_seed(0)
    return getattr(transformers, cls)(config).eval(), cls, layout, cfg["vocab_size"]


def inputs(batch, seq, vocab, layout):
    g = torch.Generator().manual_seed(batch)
    x = {"input_ids": torch.randint(5, vocab, (batch, seq), generator=g),
         "attention_mask": torch.ones(batch, seq, dtype=torch.long),
         "token_type_ids": torch.zeros(batch, seq, dtype=torch.long)}
    if layout:
        x0 = torch.randint(0, 900, (batch, seq), generator=g)
        y0 = torch.randint(0, 950, (batch, seq), generator=g)
        x["bbox"] = torch.stack([x0, y0, x0 + 80, y0 + 40], dim=-1)
    return x


def timed(call, seconds, warmup=2):
    for _ in range(warmup):
        call()
    lat, t0 = [], time.perf_counter()
    while len(lat) < 3 or time.perf_counter() - t0 < seconds:
        t = time.perf_counter()
        call()
        lat.append(time.perf_counter() - t)
    return time.perf_counter() - t0, lat


def row(impl, precision, batch, elapsed, lat, **extra):
    return {"impl": impl, "precision": precision, "batch": batch, "calls": len(lat),
            "inferences_per_s": batch * len(lat) / elapsed, "p50_ms": float(np.percentile(lat, 50)) * 1e3,
            "p99_ms": float(np.percentile(lat, 99)) * 1e3, **extra}


def run_pytorch(impl, model, x, batch, seconds, precisions, repeat, env, warmup=2):
    """Eager (`model`) or torch.compile (TorchInductor: its warm-up calls compile, once per shape and precision) in
    inference mode, fp32 and/or under bf16 autocast."""
    for precision in precisions:
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            elapsed, lat = timed(lambda: model(**x), seconds, warmup)
        name = "bf16-autocast" if precision == "bf16" else "fp32"
        print(json.dumps(row(impl, name, batch, elapsed, lat, repeat=repeat, **env)), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("joule")
    ap.add_argument("--model", default="bert-base")
    ap.add_argument("--batches", default="1,8,16")
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--seconds", type=float, default=3)
    ap.add_argument("--repeats", type=int, default=2, help="alternated rounds over the implementations")
    ap.add_argument("--impls", default="pytorch,onnxruntime,joule",
                    help="which of pytorch, pytorch-compile (torch 2.x), onnxruntime, joule to run")
    ap.add_argument("--precisions", default="bf16,fp32",
                    help="PyTorch's and joule's: bf16 (PyTorch's autocast), fp32 or both (ONNX Runtime runs fp32); "
                         "where the CPU has no bf16 arithmetic PyTorch's bf16 can take minutes a call")
    a = ap.parse_args()
    precisions = a.precisions.split(",")
    if not precisions or set(precisions) - {"bf16", "fp32"}:
        ap.error(f"--precisions {a.precisions!r}: give bf16, fp32 or bf16,fp32")
    impls = set(a.impls.split(","))
    known = {"pytorch", "pytorch-compile", "onnxruntime", "joule"}
    if not impls or impls - known:
        ap.error(f"--impls {a.impls!r}: give some of {', '.join(sorted(known))}")
    if "pytorch-compile" in impls and not hasattr(torch, "compile"):
        ap.error(f"--impls pytorch-compile: torch {torch.__version__} has no torch.compile (it needs torch 2.x)")
    batches = [int(b) for b in a.batches.split(",")]
    threads = os.cpu_count()
    torch.set_num_threads(threads)
    model, cls, layout, vocab = hf_model(a.model)
    env = {"model": a.model, "architecture": cls, "seq_len": a.seq_len, "threads": threads,
           "torch": torch.__version__, "transformers": transformers.__version__,
           "cpu": platform.processor() or platform.machine()}
    if "onnxruntime" in impls:
        import onnxruntime as ort
        work = tempfile.mkdtemp(prefix="infer_compare_")
        onnx_path = os.path.join(work, "model.onnx")
        example = inputs(2, a.seq_len, vocab, layout)
        # torch.onnx passes the inputs by position: in the order of the model's forward() (LayoutLM's bbox is second).
        names = [n for n in inspect.signature(model.forward).parameters if n in example]
        torch.onnx.export(model, tuple(example[n] for n in names), onnx_path, input_names=names,
                          output_names=["logits"], dynamic_axes={n: {0: "batch"} for n in names + ["logits"]},
                          opset_version=17, dynamo=False)
        opts = ort.SessionOptions()
        opts.intra_op_num_threads = threads
        session = ort.InferenceSession(onnx_path, opts, providers=["CPUExecutionProvider"])
        env["onnxruntime"] = ort.__version__
    compiled = torch.compile(model) if "pytorch-compile" in impls else None
    print(json.dumps({"environment": env}))
    for repeat in range(1, a.repeats + 1):
        for batch in batches:
            x = inputs(batch, a.seq_len, vocab, layout)
            if "pytorch" in impls:
                run_pytorch("pytorch-eager", model, x, batch, a.seconds, precisions, repeat, env)
            if compiled is not None:
                run_pytorch("pytorch-compile", compiled, x, batch, a.seconds, precisions, repeat, env, warmup=3)
            if "onnxruntime" in impls:
                feeds = {n: x[n].numpy() for n in names}
                elapsed, lat = timed(lambda: session.run(None, feeds), a.seconds)
                print(json.dumps(row("onnxruntime", "fp32", batch, elapsed, lat, repeat=repeat, **env)), flush=True)
        for precision in precisions if "joule" in impls else ():
            out = subprocess.run([a.joule, "bench", "infer", "--model", a.model, "--batches", a.batches, "--seq-len",
                                  str(a.seq_len), "--seconds", str(a.seconds), "--precision", precision, "--json"],
                                 capture_output=True, text=True, check=True).stdout
            j = json.loads(out.strip().splitlines()[-1])
            for p in j["points"]:
                print(json.dumps({"impl": "joule", "precision": precision, "batch": p["batch"], "calls": p["calls"],
                                  "inferences_per_s": p["inferences_per_s"], "p50_ms": p["p50_ms"],
                                  "p99_ms": p["p99_ms"], "roofline_fraction": p["roofline_fraction"],
                                  "peak_fraction": p.get("peak_fraction"),
                                  "kwh_per_million": p["kwh_per_million"], "repeat": repeat, **env}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
