#!/usr/bin/env python3
"""joule's training curve against an independent implementation: HuggingFace transformers' BertForPreTraining with
LAMB written from the published algorithm, from the same initial weights, on the same samples in the same order.

What both sides share (nothing else): the shards (`joule data create` on the synthetic corpus), the initial weights
(`joule model init` writes a HuggingFace directory; joule trains from it, transformers loads it), the order of the
samples (`joule data order` writes the sequence ids each step reads; this script reads those rows from the HDF5 shards
with h5py) and the recipe: global batch 32, LAMB (beta 0.9/0.999, eps 1e-6, weight decay 0.01 except biases and
LayerNorm, global-norm clipping at 1.0, trust ratio ||w||/||u|| where weight decay applies: You et al., "Large Batch
Optimization for Deep Learning: Training BERT in 76 minutes", ICLR 2020, as NVIDIA's BERT recipe applies it), linear
warm-up then power-0.5 decay, dropout 0. The model: 4 layers, hidden 256, 4 heads, intermediate 1024, seq 128.

Runs, each with its per-step loss: transformers fp32 (the reference; eager attention), joule fp32 1 x 32 (ranks x
micro-batch), and with --layouts joule fp32 2 x 16 and 4 x 8 with and without optimizer.shard=zero1 (under mpirun),
with --bf16 joule bf16 1 x 32. The goals (exit 1 when one fails):
  - every joule fp32 run against the reference: each of the first 10 steps' loss within 1e-4 (relative);
  - every joule fp32 curve, smoothed over 50 steps, within 1 % of the reference's at every step;
  - the held-out masked-LM accuracy at the end (every eval row) within 0.005 of the reference's;
  - bf16: the smoothed curve within 3 % and the final accuracy within 0.02 (VALIDATION.md argues the band).
Writes RESULTS/convergence.json (every run's per-step loss and final accuracy, the goals and what they measured) and
RESULTS/convergence.png (the curves and their difference from the reference).

Runs with a Python that has torch 2.x, transformers, h5py and matplotlib (PyPI), outside CI; about an hour on 2 cores
(and about half an hour more for each layout of --layouts); a run already in --work is read back, not repeated:
    python tools/check/convergence.py build/ci/tools/joule --work /tmp/convergence --results tools/check/results \
        [--steps 2000] [--layouts] [--bf16] [--mpiexec mpiexec]
"""
import argparse
import json
import math
import os
import subprocess
import sys
import time

import h5py
import numpy as np
import torch
import transformers

MODEL = dict(hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
             max_position_embeddings=512, type_vocab_size=2, hidden_act="gelu", hidden_dropout_prob=0.0,
             attention_probs_dropout_prob=0.0, layer_norm_eps=1e-12, initializer_range=0.02)
GLOBAL_BATCH, SEQ_LEN, MAX_PRED, SEED = 32, 128, 20, 42
LR, WARMUP, BETAS, EPS, WEIGHT_DECAY, MAX_GRAD_NORM = 2e-3, 0.1, (0.9, 0.999), 1e-6, 0.01, 1.0
FIRST_STEPS, FIRST_RTOL, SMOOTH, SMOOTH_RTOL, ACC_TOL = 10, 1e-4, 50, 0.01, 0.005
BF16_SMOOTH_RTOL, BF16_ACC_TOL = 0.03, 0.02
EVAL_BATCH = 64


def sh(cmd, log, env=None):
    t0 = time.time()
    with open(log, "w") as f:
        p = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
    if p.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed ({p.returncode}); see {log}:\n" + open(log).read()[-3000:])
    return time.time() - t0


def make_data(joule, work):
    """The synthetic corpus as shards (seq 128, 20 predictions) with a held-out eval set; the model's initial weights."""
    data = os.path.join(work, "data")
    if not os.path.exists(os.path.join(data, "shards", "train")):
        os.makedirs(data, exist_ok=True)
        sh([joule, "data", "synth", "--out", f"{data}/corpus.txt", "--documents", "6000", "--seed", "1"],
           f"{data}/synth.log")
        sh([joule, "data", "vocab", "--input", f"{data}/corpus.txt", "--out", f"{data}/vocab.txt", "--size", "4000"],
           f"{data}/vocab.log")
        sh([joule, "data", "create", "--input", f"{data}/corpus.txt", "--vocab", f"{data}/vocab.txt", "--out",
            f"{data}/shards", "--seq-len", str(SEQ_LEN), "--max-pred", str(MAX_PRED), "--dupe-factor", "5",
            "--shards", "4", "--eval-documents", "200", "--seed", "12345"], f"{data}/create.log")
    vocab = sum(1 for _ in open(f"{data}/vocab.txt", encoding="utf-8"))
    init = os.path.join(work, "init")
    if not os.path.exists(os.path.join(init, "model.safetensors")):
        config = dict(architectures=["BertForPreTraining"], model_type="bert", vocab_size=vocab, **MODEL)
        with open(f"{work}/model.json", "w") as f:
            json.dump(config, f, indent=2)
        sh([joule, "model", "init", "--config", f"{work}/model.json", "--out", init, "--seed", "7"],
           f"{work}/init.log")
    return data, init


def order_of(joule, work, split, global_batch, steps):
    out = os.path.join(work, f"order_{split}_{global_batch}x{steps}.json")
    if not os.path.exists(out):
        sh([joule, "data", "order", "--data", f"{work}/data/shards/{split}", "--global-batch", str(global_batch),
            "--steps", str(steps), "--seed", str(SEED), "--out", out], out + ".log")
    return json.load(open(out))


class Rows:
    """Rows of the shards by sequence id (shards in joule's order, rows in order), as the batch transformers takes."""

    def __init__(self, shards):
        self.files = [h5py.File(s["path"], "r") for s in shards]
        self.starts = np.cumsum([0] + [s["rows"] for s in shards])

    def batch(self, ids):
        cols = {k: [] for k in ("input_ids", "input_mask", "segment_ids", "masked_lm_positions", "masked_lm_ids",
                                "next_sentence_labels")}
        for i in ids:
            shard = int(np.searchsorted(self.starts, i, side="right") - 1)
            row = int(i - self.starts[shard])
            for k in cols:
                cols[k].append(np.asarray(self.files[shard][k][row]))
        t = {k: torch.from_numpy(np.stack(v).astype(np.int64)) for k, v in cols.items()}
        labels = torch.full_like(t["input_ids"], -100)
        for r in range(len(ids)):
            for p, token in zip(t["masked_lm_positions"][r].tolist(), t["masked_lm_ids"][r].tolist()):
                if p == 0:  # the first 0 ends a row's predictions (NVIDIA's loader convention)
                    break
                labels[r, p] = token
        return dict(input_ids=t["input_ids"], attention_mask=t["input_mask"], token_type_ids=t["segment_ids"],
                    labels=labels, next_sentence_label=t["next_sentence_labels"].view(-1))


def learning_rate(step, total):
    progress = step / total
    if progress < WARMUP:
        return LR * progress / WARMUP
    return LR * ((1.0 - progress) / (1.0 - WARMUP)) ** 0.5 if progress < 1 else 0.0


class Lamb:
    """LAMB as published (You et al. 2020) in NVIDIA's form: global-norm clipping, bias-corrected moments, decoupled
    weight decay, the trust ratio ||w|| / ||u|| only where weight decay applies (not biases or LayerNorm)."""

    def __init__(self, named):
        self.params = [(n, p) for n, p in named if p.requires_grad]
        self.state = {n: (torch.zeros_like(p), torch.zeros_like(p)) for n, p in self.params}
        self.t = 0

    @torch.no_grad()
    def step(self, lr):
        self.t += 1
        norm = math.sqrt(sum(float(p.grad.double().pow(2).sum()) for _, p in self.params))
        scale = MAX_GRAD_NORM / norm if norm > MAX_GRAD_NORM else 1.0
        c1, c2 = 1 - BETAS[0] ** self.t, 1 - BETAS[1] ** self.t
        for n, p in self.params:
            m, v = self.state[n]
            g = p.grad * scale
            m.mul_(BETAS[0]).add_(g, alpha=1 - BETAS[0])
            v.mul_(BETAS[1]).addcmul_(g, g, value=1 - BETAS[1])
            u = (m / c1) / ((v / c2).sqrt() + EPS)
            ratio = 1.0
            if not (n.endswith("bias") or "LayerNorm" in n):
                u.add_(p, alpha=WEIGHT_DECAY)
                w, un = float(p.double().norm()), float(u.double().norm())
                ratio = w / un if w > 0 and un > 0 else 1.0
            p.add_(u, alpha=-lr * ratio)
        return norm


def mlm_accuracy_hf(model, rows, ids):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for b in range(0, len(ids), EVAL_BATCH):
            x = rows.batch(ids[b:b + EVAL_BATCH])
            out = model(input_ids=x["input_ids"], attention_mask=x["attention_mask"],
                        token_type_ids=x["token_type_ids"])
            picked = x["labels"] != -100
            correct += int((out.prediction_logits.argmax(-1)[picked] == x["labels"][picked]).sum())
            total += int(picked.sum())
    model.train()
    return correct / total


def reference(work, init, steps, threads):
    """transformers' BertForPreTraining + LAMB on joule's order: the per-step loss and the final eval accuracy."""
    out = os.path.join(work, "reference.json")
    if os.path.exists(out):
        return json.load(open(out))
    torch.set_num_threads(threads)
    model = transformers.BertForPreTraining.from_pretrained(init, attn_implementation="eager")
    model.train()
    order = json.load(open(os.path.join(work, f"order_train_{GLOBAL_BATCH}x{steps}.json")))
    rows = Rows(order["shards"])
    opt = Lamb(model.named_parameters())
    losses, t0 = [], time.time()
    for step, ids in enumerate(order["steps"]):
        loss = model(**rows.batch(ids)).loss
        model.zero_grad(set_to_none=False)
        loss.backward()
        opt.step(learning_rate(step, steps))
        losses.append(float(loss.detach()))
        if (step + 1) % 100 == 0:
            print(f"  transformers: step {step + 1} loss {losses[-1]:.4f} ({time.time() - t0:.0f} s)", flush=True)
    eval_order = json.load(open(os.path.join(work, "order_eval_1x1.json")))
    eval_rows = Rows(eval_order["shards"])
    n_eval = int(eval_rows.starts[-1])
    result = dict(name="transformers fp32", loss=losses, mlm_accuracy=mlm_accuracy_hf(model, eval_rows,
                                                                                         list(range(n_eval))),
                  seconds=time.time() - t0, versions=dict(torch=torch.__version__,
                                                           transformers=transformers.__version__))
    json.dump(result, open(out, "w"))
    return result


def joule_run(joule, mpiexec, work, init, steps, name, ranks, micro, precision="fp32", shard="none", threads=2):
    """One joule run from the initial weights: its per-step loss and its last eval's accuracy (every eval row)."""
    run_dir = os.path.join(work, "runs", name)
    out = run_dir + ".json"
    if os.path.exists(out):
        return json.load(open(out))
    eval_rows = sum(s["rows"] for s in json.load(open(os.path.join(work, "order_eval_1x1.json")))["shards"])
    toml = f"""[model]
config = "{init}"
[data]
train = "{work}/data/shards/train"
eval = "{work}/data/shards/eval"
[train]
steps = {steps}
micro_batch = {micro}
global_batch = {GLOBAL_BATCH}
precision = "{precision}"
seed = {SEED}
threads = {max(1, threads // ranks)}
log_every_steps = 1
progress = "lines"
[optimizer]
name = "lamb"
lr = {LR}
warmup_fraction = {WARMUP}
beta1 = {BETAS[0]}
beta2 = {BETAS[1]}
eps = {EPS}
weight_decay = {WEIGHT_DECAY}
max_grad_norm = {MAX_GRAD_NORM}
shard = "{shard}"
[eval]
every_steps = {steps}
batch = {EVAL_BATCH}
max_batches = {(eval_rows + EVAL_BATCH - 1) // EVAL_BATCH}
[run]
dir = "{run_dir}"
"""
    os.makedirs(os.path.dirname(run_dir), exist_ok=True)
    with open(run_dir + ".toml", "w") as f:
        f.write(toml)
    cmd = [joule, "train", "--config", run_dir + ".toml"]
    if ranks > 1:
        cmd = [mpiexec, "-n", str(ranks), "--oversubscribe", "--allow-run-as-root", "--bind-to", "none"] + cmd
    seconds = sh(cmd, run_dir + ".log")
    lines = [json.loads(l) for l in open(os.path.join(run_dir, "metrics.jsonl"))]
    loss = {l["step"]: l["loss"] for l in lines if "loss" in l}
    evals = [l["eval"] for l in lines if "eval" in l]
    result = dict(name=name, ranks=ranks, micro_batch=micro, precision=precision, shard=shard,
                  loss=[loss[s] for s in range(1, steps + 1)], mlm_accuracy=evals[-1]["mlm_accuracy"],
                  seconds=seconds)
    json.dump(result, open(out, "w"))
    return result


def smooth(values, window):
    v = np.asarray(values, dtype=np.float64)
    c = np.cumsum(np.insert(v, 0, 0.0))
    return (c[window:] - c[:-window]) / window


def judge(ref, run, fp32):
    """The goals for one run against the reference: what each measured and whether it holds."""
    ref_loss, loss = np.asarray(ref["loss"]), np.asarray(run["loss"])
    goals = []
    if fp32:
        first = float(np.max(np.abs(loss[:FIRST_STEPS] - ref_loss[:FIRST_STEPS]) / np.abs(ref_loss[:FIRST_STEPS])))
        goals.append(dict(goal=f"first {FIRST_STEPS} steps' loss within {FIRST_RTOL:g} (relative)", measured=first,
                          holds=first <= FIRST_RTOL))
    rtol = SMOOTH_RTOL if fp32 else BF16_SMOOTH_RTOL
    window = min(SMOOTH, len(ref_loss))
    a, b = smooth(ref_loss, window), smooth(loss, window)
    worst = float(np.max(np.abs(b - a) / a))
    goals.append(dict(goal=f"{SMOOTH}-step-smoothed loss within {rtol:.0%} at every step", measured=worst,
                      holds=worst <= rtol))
    tol = ACC_TOL if fp32 else BF16_ACC_TOL
    gap = abs(run["mlm_accuracy"] - ref["mlm_accuracy"])
    goals.append(dict(goal=f"final held-out mlm_acc within {tol:g}", measured=gap, holds=gap <= tol))
    return goals


def plot(ref, runs, path, steps):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 8), sharex=True, gridspec_kw=dict(height_ratios=[3, 2]))
    window = min(SMOOTH, steps)
    x = np.arange(window, steps + 1)
    top.plot(np.arange(1, steps + 1), ref["loss"], color="0.8", lw=0.6, label="transformers fp32, per step")
    top.plot(x, smooth(ref["loss"], window), color="black", lw=2, label=f"transformers fp32 ({window}-step mean)")
    for run in runs:
        top.plot(x, smooth(run["loss"], window), lw=1, label=f"joule {run['name']}")
        bottom.plot(x, 100 * (smooth(run["loss"], window) / smooth(ref["loss"], window) - 1), lw=1,
                    label=f"joule {run['name']}")
    top.set_ylabel("training loss (MLM + NSP)")
    top.set_title("BERT 4 x 256, global batch 32, LAMB: joule against transformers, same weights and samples")
    top.legend(fontsize=8)
    bottom.axhline(0, color="black", lw=0.8)
    for band, style in ((SMOOTH_RTOL, "--"), (BF16_SMOOTH_RTOL, ":")):
        for sign in (1, -1):
            bottom.axhline(100 * sign * band, color="grey", ls=style, lw=0.8)
    bottom.set_ylabel(f"{window}-step mean: joule / transformers - 1 (%)")
    bottom.set_xlabel("optimizer step")
    bottom.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("joule")
    ap.add_argument("--work", required=True, help="scratch directory (kept: a rerun reuses finished runs)")
    ap.add_argument("--results", required=True, help="where convergence.json and convergence.png go")
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--layouts", action="store_true", help="also 2 x 16 and 4 x 8, with and without zero1")
    ap.add_argument("--bf16", action="store_true", help="also joule bf16 1 x 32")
    ap.add_argument("--mpiexec", default="mpiexec")
    a = ap.parse_args()
    joule, work = os.path.abspath(a.joule), os.path.abspath(a.work)
    os.makedirs(work, exist_ok=True)
    os.makedirs(a.results, exist_ok=True)
    _, init = make_data(joule, work)
    order_of(joule, work, "train", GLOBAL_BATCH, a.steps)
    order_of(joule, work, "eval", 1, 1)
    print("transformers (reference) ...", flush=True)
    ref = reference(work, init, a.steps, a.threads)
    plan = [("fp32 1x32", 1, 32, "fp32", "none")]
    if a.layouts:
        plan += [("fp32 2x16", 2, 16, "fp32", "none"), ("fp32 4x8", 4, 8, "fp32", "none"),
                 ("fp32 2x16 zero1", 2, 16, "fp32", "zero1"), ("fp32 4x8 zero1", 4, 8, "fp32", "zero1")]
    if a.bf16:
        plan += [("bf16 1x32", 1, 32, "bf16", "none")]
    runs = []
    for name, ranks, micro, precision, shard in plan:
        print(f"joule {name} ...", flush=True)
        runs.append(joule_run(joule, a.mpiexec, work, init, a.steps, name.replace(" ", "_"), ranks, micro, precision,
                              shard, a.threads))
        runs[-1]["name"] = name
    report, ok = [], True
    for run in runs:
        goals = judge(ref, run, run["precision"] == "fp32")
        ok &= all(g["holds"] for g in goals)
        report.append(dict(run=run["name"], goals=goals))
        for g in goals:
            print(f"{'ok  ' if g['holds'] else 'FAIL'} {run['name']}: {g['goal']}: {g['measured']:.3g}")
        print(f"     {run['name']}: final mlm_acc {run['mlm_accuracy']:.4f} (transformers {ref['mlm_accuracy']:.4f}); "
              f"{run['seconds']:.0f} s")
    setup = dict(model=MODEL, global_batch=GLOBAL_BATCH, seq_len=SEQ_LEN, max_predictions=MAX_PRED, seed=SEED, lr=LR,
                 warmup_fraction=WARMUP, steps=a.steps, threads=a.threads, versions=ref["versions"])
    with open(os.path.join(a.results, "convergence.json"), "w") as f:
        json.dump(dict(setup=setup, goals=report, reference=ref, runs=runs), f)
        f.write("\n")
    plot(ref, runs, os.path.join(a.results, "convergence.png"), a.steps)
    print(f"wrote {a.results}/convergence.json and convergence.png")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
