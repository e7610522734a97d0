#!/usr/bin/python3
"""Reference trajectory for joule's LAMB and AdamW, written from the semantics of apex's FusedLAMB as
NVIDIA's BERT recipe uses it (global-norm clipping to 1.0, bias-corrected moments, decoupled weight
decay 0.01 except biases/LayerNorm, trust ratio ||w||/||update|| only where weight decay applies) and
of AdamW, with NVIDIA's PolyWarmUpScheduler (linear warm-up, then power-0.5 decay).
Writes tests/fixtures/optimizer/trajectory.json.  Regenerate: /usr/bin/python3 tools/reference/lamb_golden.py
"""
import json
import math
import os

import torch

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures", "optimizer")
NAMES = ["encoder.dense.weight", "encoder.dense.bias", "encoder.LayerNorm.weight", "embeddings.weight"]
SHAPES = [(4, 3), (4,), (3,), (5, 3)]
STEPS, BASE_LR, WARMUP = 7, 0.02, 0.3


def schedule(step, total):
    progress = step / total
    if progress < WARMUP:
        return BASE_LR * progress / WARMUP
    return BASE_LR * ((1.0 - progress) / (1.0 - WARMUP)) ** 0.5 if progress < 1 else 0.0


def run(kind, params, grads):
    params = [p.clone() for p in params]
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    b1, b2, eps, wd = 0.9, 0.999, 1e-6, 0.01
    norms, lrs = [], []
    for t in range(1, STEPS + 1):
        g = [x.clone() for x in grads[t - 1]]
        norm = math.sqrt(sum(float((x.double() ** 2).sum()) for x in g))
        if norm > 1.0:
            g = [x * (1.0 / norm) for x in g]
        lr = schedule(t - 1, STEPS)
        norms.append(norm)
        lrs.append(lr)
        for i, name in enumerate(NAMES):
            decay = not (name.endswith("bias") or "LayerNorm" in name)
            m[i] = b1 * m[i] + (1 - b1) * g[i]
            v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i]
            m_hat = m[i] / (1 - b1 ** t)
            v_hat = v[i] / (1 - b2 ** t)
            if kind == "lamb":
                update = m_hat / (v_hat.sqrt() + eps)
                ratio = 1.0
                if decay:
                    update = update + wd * params[i]
                    w, u = float(params[i].norm()), float(update.norm())
                    if w > 0 and u > 0:
                        ratio = w / u
                params[i] = params[i] - lr * ratio * update
            else:
                if decay:
                    params[i] = params[i] * (1 - lr * wd)
                params[i] = params[i] - lr * m_hat / (v_hat.sqrt() + eps)
    return params, norms, lrs


def main():
    gen = torch.Generator().manual_seed(11)
    params = [torch.randn(*s, generator=gen) for s in SHAPES]
    grads = []
    for t in range(STEPS):
        scale = 2.0 if t % 2 == 0 else 0.05  # alternate above and below the clipping norm
        step = [torch.randn(*s, generator=gen) * scale for s in SHAPES]
        if t == 3:
            step[3] = torch.zeros(SHAPES[3])  # a parameter with no gradient signal this step
        grads.append(step)
    out = {"generator": "tools/reference/lamb_golden.py, torch " + torch.__version__, "names": NAMES,
           "steps": STEPS, "base_lr": BASE_LR, "warmup_fraction": WARMUP,
           "initial": [p.flatten().tolist() for p in params], "shapes": [list(s) for s in SHAPES],
           "grads": [[g.flatten().tolist() for g in step] for step in grads]}
    for kind in ("lamb", "adamw"):
        final, norms, lrs = run(kind, params, grads)
        out[kind] = {"final": [p.flatten().tolist() for p in final], "grad_norms": norms, "lrs": lrs}
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "trajectory.json"), "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
