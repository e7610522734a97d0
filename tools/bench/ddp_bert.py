#!/usr/bin/python3
"""PyTorch-Python reference for `joule bench train`: the same BERT pretraining step under
DistributedDataParallel over gloo, as a PyTorch user would run it on this machine.

Same architecture and parameter count as joule's BertForPreTraining (post-LN encoder, erf GELU, tanh pooler,
masked-only MLM head with the decoder tied to the word embeddings, NSP head; HF names), the same micro-batch,
sequence length, dropout (the config's, 0.1) and NVIDIA-style LAMB (global-norm clipping 1.0, bias-corrected
moments, decoupled weight decay 0.01 except biases and LayerNorm, trust ratio). DDP as users configure it:
25 MB buckets, gradient_as_bucket_view=True. Synthetic batches held in memory, as on the joule side.

LAMB two ways (--lamb): "foreach", as a PyTorch user would write it for speed (torch._foreach_* ops over each
parameter group: one call per operation instead of a Python loop over tensors; neither PyTorch 1.13 nor 2.x ships a
LAMB, fused or not, so this is the strongest form without apex), and "loop", a Python loop of in-place tensor ops.
"both" (the default) alternates them step by step in one run, warm-up included, and reports each: seq_per_s is the
faster one's, lamb.{foreach,loop} hold each one's median step and optimizer time.

--precision bf16 runs forward and loss under torch.autocast("cpu", dtype=torch.bfloat16), PyTorch's own CPU mixed
precision (fp32 parameters, gradients and LAMB state; backward follows the forward's dtypes). One change a user must
make for it: PyTorch 1.13's CPU autocast hands LayerNorm a bf16 input with fp32 weights and fails ("expected scalar
type BFloat16 but found Float"), so every LayerNorm input is cast to fp32 (`ln` below), as the autocast recipe on
GPUs does by listing layer_norm among the fp32 ops. The same script runs on PyTorch 2.x.

--shard zero1 runs LAMB under torch.distributed.optim.ZeroRedundancyOptimizer (ZeRO stage 1: each rank keeps the
moments of its part of the parameters, updates that part and broadcasts it), the counterpart of joule's
optimizer.shard = zero1; the gradient norm that LAMB clips by is still the global one (summed over the ranks).

--compile (PyTorch 2.x) runs the DDP-wrapped model through torch.compile (TorchInductor, its default backend: fused
C++/OpenMP kernels for the element-wise work, the matmuls left to oneDNN/MKL; DDP's optimizer splits the graph at its
buckets so the all-reduce still overlaps backward). Compilation happens in the warm-up steps; the JSON records their
time (compile_s) apart from the timed steps. LAMB stays eager, as it is in the eager runs.

Run under mpirun (ranks from OMPI_COMM_WORLD_*):
  mpirun -np 2 /usr/bin/python3 tools/bench/ddp_bert.py --config configs/models/bert-base.json --threads 1
Prints one JSON line from rank 0.
"""
import argparse
import json
import math
import os
import resource
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F


def ln(norm, x):
    """LayerNorm in fp32 (under CPU autocast, x arrives in bf16; a no-op cast in fp32)."""
    return norm(x.float())


class Layer(nn.Module):
    def __init__(self, c):
        super().__init__()
        h, i = c["hidden_size"], c["intermediate_size"]
        self.heads = c["num_attention_heads"]
        self.query, self.key, self.value = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)
        self.attention_output = nn.Linear(h, h)
        self.attention_norm = nn.LayerNorm(h, eps=c["layer_norm_eps"])
        self.intermediate = nn.Linear(h, i)
        self.output = nn.Linear(i, h)
        self.output_norm = nn.LayerNorm(h, eps=c["layer_norm_eps"])
        self.p_hidden, self.p_attn = c["hidden_dropout_prob"], c["attention_probs_dropout_prob"]

    def forward(self, x, mask_bias):
        b, s, h = x.shape
        d = h // self.heads

        def split(t):
            return t.view(b, s, self.heads, d).transpose(1, 2)

        q, k, v = split(self.query(x)), split(self.key(x)), split(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d) + mask_bias
        probs = F.dropout(torch.softmax(scores, dim=-1), self.p_attn, self.training)
        context = torch.matmul(probs, v).transpose(1, 2).reshape(b, s, h)
        x = ln(self.attention_norm, x + F.dropout(self.attention_output(context), self.p_hidden, self.training))
        y = self.output(F.gelu(self.intermediate(x)))
        return ln(self.output_norm, x + F.dropout(y, self.p_hidden, self.training))


class BertForPreTraining(nn.Module):
    def __init__(self, c):
        super().__init__()
        h = c["hidden_size"]
        self.word_embeddings = nn.Embedding(c["vocab_size"], h, padding_idx=0)
        self.position_embeddings = nn.Embedding(c["max_position_embeddings"], h)
        self.token_type_embeddings = nn.Embedding(c["type_vocab_size"], h)
        self.embedding_norm = nn.LayerNorm(h, eps=c["layer_norm_eps"])
        self.layers = nn.ModuleList(Layer(c) for _ in range(c["num_hidden_layers"]))
        self.pooler = nn.Linear(h, h)
        self.mlm_bias = nn.Parameter(torch.zeros(c["vocab_size"]))
        self.mlm_transform = nn.Linear(h, h)
        self.mlm_norm = nn.LayerNorm(h, eps=c["layer_norm_eps"])
        self.nsp = nn.Linear(h, 2)
        self.p_hidden = c["hidden_dropout_prob"]
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=c["initializer_range"])
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, ids, types, attention, positions, labels, nsp_labels):
        b, s = ids.shape
        x = self.word_embeddings(ids) + self.position_embeddings(torch.arange(s).expand(b, s)) + self.token_type_embeddings(types)
        x = F.dropout(ln(self.embedding_norm, x), self.p_hidden, self.training)
        mask_bias = (1.0 - attention[:, None, None, :].float()) * -10000.0
        for layer in self.layers:
            x = layer(x, mask_bias)
        pooled = torch.tanh(self.pooler(x[:, 0]))
        # Masked-only MLM head: gather the masked positions first (NVIDIA's implementation does the same).
        sel = labels != 0
        rows = x.gather(1, positions.unsqueeze(-1).expand(-1, -1, x.shape[-1]))[sel]
        t = ln(self.mlm_norm, F.gelu(self.mlm_transform(rows)))
        logits = F.linear(t, self.word_embeddings.weight, self.mlm_bias)
        mlm = F.cross_entropy(logits.float(), labels[sel])
        return mlm + F.cross_entropy(self.nsp(pooled).float(), nsp_labels)


class Lamb(torch.optim.Optimizer):
    """NVIDIA's LAMB as apex FusedLAMB computes it: step() a Python loop of in-place tensor ops, step(foreach=True) the
    same arithmetic in torch._foreach_* calls over each group. sharded=True: this instance holds one rank's part of
    the parameters (ZeroRedundancyOptimizer's), and the clipping norm is the global one, its square summed over the
    ranks."""

    def __init__(self, params, lr=1e-4, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01, max_grad_norm=1.0,
                 sharded=False):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        self.max_grad_norm = max_grad_norm
        self.sharded = sharded
        self.t = 0

    def grad_norm(self, norms):
        """The global gradient norm from this instance's per-parameter norms."""
        square = torch.stack(norms).square().sum() if norms else torch.zeros(())
        if self.sharded:
            dist.all_reduce(square)
        return float(square.sqrt())

    @torch.no_grad()
    def step(self, closure=None, foreach=False):
        if foreach:
            return self.step_foreach()
        self.t += 1
        params = [p for g in self.param_groups for p in g["params"]]
        norm = self.grad_norm([p.grad.norm() for p in params])
        scale = self.max_grad_norm / norm if norm > self.max_grad_norm else 1.0
        for g in self.param_groups:
            b1, b2 = g["betas"]
            c1, c2 = 1 - b1 ** self.t, 1 - b2 ** self.t
            for p in g["params"]:
                st = self.state[p]
                if not st:
                    st["m"], st["v"] = torch.zeros_like(p), torch.zeros_like(p)
                grad = p.grad.mul(scale) if scale != 1.0 else p.grad
                st["m"].mul_(b1).add_(grad, alpha=1 - b1)
                st["v"].mul_(b2).addcmul_(grad, grad, value=1 - b2)
                update = (st["m"] / c1).div_((st["v"] / c2).sqrt_().add_(g["eps"]))
                ratio = 1.0
                if g["weight_decay"] > 0:
                    update.add_(p, alpha=g["weight_decay"])
                    w, u = p.norm(), update.norm()
                    ratio = float(w / u) if w > 0 and u > 0 else 1.0
                p.add_(update, alpha=-g["lr"] * ratio)

    @torch.no_grad()
    def step_foreach(self):
        self.t += 1
        params = [p for g in self.param_groups for p in g["params"]]
        norm = self.grad_norm(list(torch._foreach_norm([p.grad for p in params])) if params else [])
        scale = self.max_grad_norm / norm if norm > self.max_grad_norm else 1.0
        for g in self.param_groups:
            ps = g["params"]
            if not ps:  # a rank's part of the parameters may hold none of a group
                continue
            b1, b2 = g["betas"]
            c1, c2 = 1 - b1 ** self.t, 1 - b2 ** self.t
            for p in ps:
                if not self.state[p]:
                    self.state[p]["m"], self.state[p]["v"] = torch.zeros_like(p), torch.zeros_like(p)
            ms = [self.state[p]["m"] for p in ps]
            vs = [self.state[p]["v"] for p in ps]
            grads = [p.grad for p in ps]
            if scale != 1.0:
                grads = torch._foreach_mul(grads, scale)
            torch._foreach_mul_(ms, b1)
            torch._foreach_add_(ms, grads, alpha=1 - b1)
            torch._foreach_mul_(vs, b2)
            torch._foreach_addcmul_(vs, grads, grads, value=1 - b2)
            denom = torch._foreach_div(vs, c2)
            torch._foreach_sqrt_(denom)
            torch._foreach_add_(denom, g["eps"])
            update = torch._foreach_div(ms, c1)
            torch._foreach_div_(update, denom)
            if g["weight_decay"] > 0:
                torch._foreach_add_(update, ps, alpha=g["weight_decay"])
                w = torch.stack(torch._foreach_norm(ps))
                u = torch.stack(torch._foreach_norm(update))
                ratio = torch.where((w > 0) & (u > 0), w / u, torch.ones_like(w))
                torch._foreach_mul_(update, (-g["lr"] * ratio).tolist())
                torch._foreach_add_(ps, update)
            else:
                torch._foreach_add_(ps, update, alpha=-g["lr"])


def lamb_groups(named, weight_decay=0.01):
    """LAMB's two parameter groups: weight decay for the weights, none for biases and LayerNorm parameters."""
    decay = [p for n, p in named if not (n.endswith("bias") or "norm" in n)]
    no_decay = [p for n, p in named if n.endswith("bias") or "norm" in n]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def host_facts():
    """What the figures depend on besides the script: BLAS, the ISA PyTorch dispatches to, the Python."""
    config = torch.__config__.show()
    blas = next((w.split("=", 1)[1] for w in config.replace(",", " ").split() if w.startswith("BLAS_INFO=")), "?")
    capability = getattr(torch.backends.cpu, "get_cpu_capability", None) if hasattr(torch.backends, "cpu") else None
    return {"blas": blas, "cpu_capability": capability() if capability else "?",
            "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE", ""), "python": sys.version.split()[0]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", required=True)
    ap.add_argument("--seq-len", type=int, default=128)
    ap.add_argument("--micro-batch", type=int, default=8)
    ap.add_argument("--max-predictions", type=int, default=20)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--port", type=int, default=29517)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--lamb", choices=["foreach", "loop", "both"], default="both")
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (inductor; PyTorch 2.x)")
    ap.add_argument("--shard", choices=["none", "zero1"], default="none",
                    help="zero1: LAMB under torch's ZeroRedundancyOptimizer (each rank updates its part of the "
                         "parameters and broadcasts them), as joule's optimizer.shard = zero1")
    a = ap.parse_args()
    if a.compile and not hasattr(torch, "compile"):
        sys.exit(f"ddp_bert.py: --compile needs PyTorch 2.x (torch.compile); this is PyTorch {torch.__version__}")
    rank = int(os.environ.get("OMPI_COMM_WORLD_RANK", "0"))
    world = int(os.environ.get("OMPI_COMM_WORLD_SIZE", "1"))
    torch.set_num_threads(a.threads)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{a.port}", rank=rank, world_size=world)
    c = json.load(open(a.config))
    torch.manual_seed(1)
    model = BertForPreTraining(c)
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=25, gradient_as_bucket_view=True)
    if a.compile:
        ddp = torch.compile(ddp)
    groups = lamb_groups(list(model.named_parameters()))
    if a.shard == "zero1":
        from torch.distributed.optim import ZeroRedundancyOptimizer
        # parameters_as_bucket_view: the updated parameters broadcast as buckets, not one call per tensor (bert-tiny's
        # optimizer step 77 ms against 19 with it)
        opt = ZeroRedundancyOptimizer(groups, optimizer_class=Lamb, parameters_as_bucket_view=True, sharded=True)
    else:
        opt = Lamb(groups)
    g = torch.Generator().manual_seed(100 + rank)
    b, s, p = a.micro_batch, a.seq_len, a.max_predictions
    ids = torch.randint(5, c["vocab_size"], (b, s), generator=g)
    types = torch.zeros(b, s, dtype=torch.long)
    types[:, s // 2:] = 1
    attention = torch.ones(b, s, dtype=torch.long)
    positions = torch.stack([torch.randperm(s - 1, generator=g)[:p].sort().values + 1 for _ in range(b)])
    labels = torch.randint(5, c["vocab_size"], (b, p), generator=g)
    nsp_labels = torch.randint(0, 2, (b,), generator=g)
    model.train()
    variants = ["foreach", "loop"] if a.lamb == "both" else [a.lamb]
    times = {v: [] for v in variants}
    opt_times = {v: [] for v in variants}
    steps = a.steps * len(variants)
    warmup = max(a.warmup, len(variants))  # each variant warmed up at least once
    started = time.perf_counter()
    warmup_s = 0.0
    for it in range(warmup + steps):
        if it == warmup:
            warmup_s = time.perf_counter() - started
        variant = variants[it % len(variants)]
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = ddp(ids, types, attention, positions, labels, nsp_labels)
        loss.backward()
        t1 = time.perf_counter()
        opt.step(foreach=variant == "foreach")
        t2 = time.perf_counter()
        if it >= warmup:
            times[variant].append(t2 - t0)
            opt_times[variant].append(t2 - t1)
    rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024.0])
    dist.all_reduce(rss, op=dist.ReduceOp.MAX)
    if rank == 0:
        lamb = {v: {"step_s": statistics.median(times[v]), "step_s_all": times[v],
                    "optimizer_s": statistics.median(opt_times[v]), "seq_per_s": b * world / statistics.median(times[v])}
                for v in variants}
        best = max(variants, key=lambda v: lamb[v]["seq_per_s"])
        params = sum(x.numel() for x in model.parameters())
        print(json.dumps({"impl": "pytorch-ddp-gloo", "model": os.path.basename(a.config).replace(".json", ""), "ranks": world,
                          "threads": a.threads, "precision": a.precision, "micro_batch": b, "seq_len": s,
                          "shard": a.shard, "step_s": lamb[best]["step_s"], "step_s_all": lamb[best]["step_s_all"],
                          "seq_per_s": lamb[best]["seq_per_s"], "lamb_best": best, "lamb": lamb,
                          "peak_rss_bytes": float(rss[0]), "params": params,
                          "loss": float(loss.detach()), "torch": torch.__version__, "host": host_facts(),
                          **({"compile": "inductor", "compile_s": warmup_s} if a.compile else {})}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
