#!/usr/bin/python3
"""fp32 matmuls through the BLAS that LibTorch's CPU `linear` calls for fp32 (OpenBLAS in Debian's build, MKL in
PyPI's) against oneDNN's fp32 matmul (AVX-512 where the CPU has it) and oneDNN's bf16 matmul, one thread, on the
Linear shapes of a BERT step at micro-batch 8 x 128 tokens (M = 1024 rows; the MLM decoder at 160 masked rows).
GFLOP/s, median of 5 calls after one warm-up.

    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 tools/bench/gemm_backends.py [--hidden 768] [--out FILE]

--out appends one JSON line per shape (every call's time kept) to FILE, e.g. a file that tools/bench/bench_env.py
started; tools/bench/tables.py makes BENCHMARKS.md's table from it.

Uses PyTorch's own entry points: F.linear (its BLAS sgemm), torch._C._nn.mkldnn_linear on oneDNN-layout tensors
(oneDNN fp32), F.linear on bf16 tensors (oneDNN bf16). Whatever OPENBLAS_CORETYPE the environment sets applies.
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F


def rate(fn, flops, calls=5):
    """(GFLOP/s of the median call, every call's seconds)."""
    fn()
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return flops / statistics.median(times) / 1e9, times


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=30522)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    torch.set_num_threads(1)
    config = torch.__config__.show().replace(",", " ").split()
    blas = next((w.split("=", 1)[1] for w in config if w.startswith("BLAS_INFO=")), "?")
    h = a.hidden
    shapes = [(1024, h, h, ""), (1024, h, 4 * h, ""), (1024, 4 * h, h, ""), (160, h, a.vocab, "MLM decoder")]
    print(f"torch {torch.__version__} (F.linear's fp32 BLAS: {blas}); one thread; GFLOP/s for x[M,K] W[N,K]^T")
    print(f"{'M':>5} {'K':>5} {'N':>6} {'BLAS fp32':>14} {'oneDNN fp32':>12} {'oneDNN bf16':>12}")
    for m, k, n, what in shapes:
        x, w, b = torch.randn(m, k), torch.randn(n, k), torch.zeros(n)
        flops = 2 * m * k * n
        blas_rate, blas_t = rate(lambda: F.linear(x, w, b), flops)
        xm, wm, bm = x.to_mkldnn(), w.to_mkldnn(), b.to_mkldnn()
        dnnl, dnnl_t = rate(lambda: torch._C._nn.mkldnn_linear(xm, wm, bm), flops)
        xb, wb, bb = x.bfloat16(), w.bfloat16(), b.bfloat16()
        bf16, bf16_t = rate(lambda: F.linear(xb, wb, bb), flops)
        print(f"{m:>5} {k:>5} {n:>6} {blas_rate:>14.0f} {dnnl:>12.0f} {bf16:>12.0f}")
        if a.out:
            with open(a.out, "a") as f:
                f.write(json.dumps({"record": "gemm", "m": m, "k": k, "n": n, "what": what, "torch": torch.__version__,
                                    "blas": blas, "threads": 1, "gflops": {"blas_fp32": blas_rate, "onednn_fp32": dnnl, "onednn_bf16": bf16},
                                    "call_s": {"blas_fp32": blas_t, "onednn_fp32": dnnl_t, "onednn_bf16": bf16_t}}) + "\n")


if __name__ == "__main__":
    main()
