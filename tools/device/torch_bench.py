#!/usr/bin/env python3
"""PyTorch's own BERT pretraining step on the same GPU, as the anchor for `joule bench train --device cuda`.

HuggingFace's BertForPreTraining (transformers, attention through PyTorch's scaled_dot_product_attention), bf16
autocast with fp32 weights, the MLM loss on --max-pred positions a row plus the NSP loss, and torch.optim.AdamW
(fused: one kernel for every parameter; PyTorch has no LAMB) at --seq-len and each --micro-batch. Prints one JSON
line per micro-batch: seq/s, the median step, peak memory. Each step timed between two device synchronisations, after --warmup steps.

  python3 tools/device/torch_bench.py --config bert-large --seq-len 128 --micro-batch 64 128 256
"""
import argparse
import json
import os
import statistics
import sys
import time

import torch
from transformers import BertConfig, BertForPreTraining

CONFIGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "configs", "models")


def batch(config, micro_batch, seq_len, max_pred, device):
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, config.vocab_size, (micro_batch, seq_len), generator=g)
    labels = torch.full_like(ids, -100)
    labels[:, 1:1 + max_pred] = ids[:, 1:1 + max_pred]
    return {
        "input_ids": ids.to(device),
        "token_type_ids": torch.zeros_like(ids).to(device),
        "attention_mask": torch.ones_like(ids).to(device),
        "labels": labels.to(device),
        "next_sentence_label": torch.randint(0, 2, (micro_batch,), generator=g).to(device),
    }


def measure(name, micro_batch, args):
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    config = BertConfig.from_json_file(os.path.join(CONFIGS, name + ".json"))  # joule's own model config
    model = BertForPreTraining(config).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
    inputs = batch(config, micro_batch, args.seq_len, args.max_pred, device)
    times = []
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    for step in range(args.warmup + args.steps):
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = model(**inputs).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if cuda:
            torch.cuda.synchronize()
        if step >= args.warmup:
            times.append(time.perf_counter() - start)
    median = statistics.median(times)
    return {"bench": "torch_train", "torch": torch.__version__, "transformers": __import__("transformers").__version__,
            "attention": model.config._attn_implementation, "config": name, "seq_len": args.seq_len,
            "micro_batch": micro_batch, "steps": args.steps, "step_s_median": median,
            "seq_per_s": micro_batch / median,
            "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30 if cuda else None,
            "gpu": torch.cuda.get_device_name() if cuda else None}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default="bert-large", help="a model of configs/models: bert-base, bert-large")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--max-pred", type=int, default=20)
    p.add_argument("--micro-batch", type=int, nargs="+", default=[64, 128, 256])
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--device", default="cuda", help="cuda; cpu only to rehearse the script on a build machine")
    args = p.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        sys.exit("torch_bench.py: no GPU")
    for micro_batch in args.micro_batch:
        print(json.dumps(measure(args.config, micro_batch, args)), flush=True)


if __name__ == "__main__":
    main()
