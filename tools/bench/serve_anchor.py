#!/usr/bin/env python3
"""What a user would write by hand to serve a classifier: FastAPI + uvicorn + PyTorch eager (bf16) with transformers,
and the same dynamic batching as `joule serve` (a batch closes at --max-batch requests or when its oldest has waited
--max-queue-delay-ms), speaking the same Open Inference Protocol v2 route, so that `joule bench serve --url` drives
both alike. It is the anchor of BENCHMARKS.md's served-rate table, not part of joule, and runs outside CI:

    ~/.pyenv/versions/3.11.7/bin/python tools/bench/serve_anchor.py --model DIR --port 8001 [--max-batch 8] \
        [--max-queue-delay-ms 5] [--threads 2] [--precision bf16|fp32]
    joule bench serve --model DIR --url http://127.0.0.1:8001 --p99-ms 100 --json

Needs torch 2.x, transformers, fastapi and uvicorn from PyPI. Routes: POST /v2/models/NAME/infer (JSON "text" BYTES
[N]; outputs "label" and "score"), GET /v2/health/ready, and /metrics with what `joule bench serve` reads
(joule_model_info: what is served; joule_batch_examples_sum/_count; joule_inferences_total). NAME is the directory's
name.
"""
import argparse
import asyncio
import os
import threading
import time

import torch
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse
from transformers import AutoModelForSequenceClassification, BertTokenizerFast

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--model", required=True)
parser.add_argument("--port", type=int, default=8001)
parser.add_argument("--max-batch", type=int, default=8)
parser.add_argument("--max-queue-delay-ms", type=float, default=5)
parser.add_argument("--threads", type=int, default=os.cpu_count())
parser.add_argument("--precision", choices=["bf16", "fp32"], default="bf16")
args = parser.parse_args()

name = os.path.basename(os.path.normpath(args.model))
tokenizer = BertTokenizerFast(vocab_file=os.path.join(args.model, "vocab.txt"), do_lower_case=True)
model, labels = None, []
counts = {"batches": 0, "examples": 0, "inferences": 0}
queue = []  # (text, future, loop, arrival)
cv = threading.Condition()


def run(texts):
    enc = tokenizer(texts, padding=True, truncation=True, max_length=512, return_tensors="pt")
    with torch.inference_mode():
        logits = model(**enc).logits.float()
    probs = logits.softmax(-1)
    score, index = probs.max(-1)
    return [(labels[i], float(s)) for i, s in zip(index.tolist(), score.tolist())]


def load():
    global model, labels
    torch.set_num_threads(args.threads)
    model = AutoModelForSequenceClassification.from_pretrained(args.model).eval()
    if args.precision == "bf16":
        model = model.to(torch.bfloat16)
    labels = [model.config.id2label[i] for i in range(model.config.num_labels)]


def worker():
    """One batch at a time on every core: at --max-batch requests, or when the oldest has waited the delay. The model
    is loaded and every forward pass runs on this thread: a second thread running PyTorch's OpenMP regions keeps a
    second OpenMP pool, and with more of libgomp's threads than cores their spinning is throttled (joule serve's
    forward passes took 41-63 ms instead of 27 that way)."""
    load()
    run(["warm up"] * args.max_batch)
    ready.set()
    delay = args.max_queue_delay_ms / 1e3
    while True:
        with cv:
            while not queue:
                cv.wait()
            while len(queue) < args.max_batch:
                left = queue[0][3] + delay - time.monotonic()
                if left <= 0:
                    break
                cv.wait(left)
            batch, queue[:] = queue[: args.max_batch], queue[args.max_batch:]
        try:
            results = run([b[0] for b in batch])
            for (_, fut, loop, _), r in zip(batch, results):
                loop.call_soon_threadsafe(fut.set_result, r)
        except Exception as e:  # noqa: BLE001 - every request of a failed batch gets the error
            for _, fut, loop, _ in batch:
                loop.call_soon_threadsafe(fut.set_exception, e)
        counts["batches"] += 1
        counts["examples"] += len(batch)
        counts["inferences"] += len(batch)


app = FastAPI()


@app.post("/v2/models/{model_name}/infer")
async def infer(model_name: str, request: Request):
    if model_name != name:
        return JSONResponse({"error": f"unknown model '{model_name}'"}, status_code=404)
    body = await request.json()
    texts = next(i["data"] for i in body["inputs"] if i["name"] == "text")
    loop = asyncio.get_running_loop()
    futures = []
    with cv:
        for t in texts:
            fut = loop.create_future()
            queue.append((t, fut, loop, time.monotonic()))
            futures.append(fut)
        cv.notify()
    results = await asyncio.gather(*futures)
    return {"model_name": name, "outputs": [
        {"name": "label", "datatype": "BYTES", "shape": [len(results)], "data": [r[0] for r in results]},
        {"name": "score", "datatype": "FP32", "shape": [len(results)], "data": [r[1] for r in results]}]}


@app.get("/v2/health/ready")
async def ready():
    return PlainTextResponse("")


@app.get("/metrics")
async def metrics():
    return PlainTextResponse(
        f'joule_model_info{{model="{name}",architecture="{type(model).__name__} (transformers, FastAPI)",'
        f'precision="{args.precision}",threads="{args.threads}",max_batch="{args.max_batch}"}} 1\n'
        f'joule_batch_examples_sum {counts["examples"]}\njoule_batch_examples_count {counts["batches"]}\n'
        f'joule_inferences_total {counts["inferences"]}\n')


ready = threading.Event()
threading.Thread(target=worker, daemon=True).start()
ready.wait()
print(f"serving {name} on http://127.0.0.1:{args.port} (torch {torch.__version__}, {args.precision})", flush=True)
uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")
