#!/usr/bin/python3
"""fp32 matmuls through OpenBLAS (what LibTorch's CPU `linear` calls for fp32) against oneDNN's fp32 matmul (AVX-512
where the CPU has it) and oneDNN's bf16 matmul, one thread, on the Linear shapes of a BERT step at micro-batch 8 x 128
tokens (M = 1024 rows; the MLM decoder at 160 masked rows). GFLOP/s, median of 5 calls after one warm-up.

    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 tools/bench/gemm_backends.py [--hidden 768]

Uses PyTorch's own entry points: F.linear (OpenBLAS sgemm), torch._C._nn.mkldnn_linear on oneDNN-layout tensors
(oneDNN fp32), F.linear on bf16 tensors (oneDNN bf16). Whatever OPENBLAS_CORETYPE the environment sets applies.
"""
import argparse
import statistics
import time

import torch
import torch.nn.functional as F


def rate(fn, flops, calls=5):
    fn()
    times = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return flops / statistics.median(times) / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--vocab", type=int, default=30522)
    a = ap.parse_args()
    torch.set_num_threads(1)
    h = a.hidden
    shapes = [(1024, h, h), (1024, h, 4 * h), (1024, 4 * h, h), (160, h, a.vocab)]
    print(f"torch {torch.__version__}; one thread; GFLOP/s for x[M,K] W[N,K]^T")
    print(f"{'M':>5} {'K':>5} {'N':>6} {'OpenBLAS fp32':>14} {'oneDNN fp32':>12} {'oneDNN bf16':>12}")
    for m, k, n in shapes:
        x, w, b = torch.randn(m, k), torch.randn(n, k), torch.zeros(n)
        flops = 2 * m * k * n
        blas = rate(lambda: F.linear(x, w, b), flops)
        xm, wm, bm = x.to_mkldnn(), w.to_mkldnn(), b.to_mkldnn()
        dnnl = rate(lambda: torch._C._nn.mkldnn_linear(xm, wm, bm), flops)
        xb, wb, bb = x.bfloat16(), w.bfloat16(), b.bfloat16()
        bf16 = rate(lambda: F.linear(xb, wb, bb), flops)
        print(f"{m:>5} {k:>5} {n:>6} {blas:>14.0f} {dnnl:>12.0f} {bf16:>12.0f}")


if __name__ == "__main__":
    main()
