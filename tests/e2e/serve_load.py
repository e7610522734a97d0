#!/usr/bin/env python3
"""joule serve under hostile load: 1,000 connections at once, then 10,000 malformed requests mixed with 1,000 valid ones
(200 connections at a time). Every valid request must be answered 200 with joule infer's label for its line, every
malformed one with a 4xx (never a 5xx, never a dropped connection), the server must live on, and its resident memory
may grow by at most RSS_BOUND_MIB from after a warm-up of the same kinds (1,000 at once, 2,000 malformed) to the end.
usage: serve_load.py URL PID REF.jsonl TEXTS.jsonl"""
import asyncio
import json
import struct
import sys

URL, PID, REF, TEXTS = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
HOST, PORT = URL[len("http://"):].split(":")
RSS_BOUND_MIB = 64
ref = [json.loads(l) for l in open(REF)]
texts = [json.loads(l) for l in open(TEXTS)]


def rss_mib():
    for line in open(f"/proc/{PID}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024


def request(body, headers=b"", path=b"/v2/models/seq/infer"):
    return (b"POST " + path + b" HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Type: application/json\r\n" +
            headers + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


def valid(k):
    line = texts[k % len(texts)]
    inputs = [{"name": "text", "datatype": "BYTES", "shape": [1], "data": [line["text"]]}]
    if "text_pair" in line:
        inputs.append({"name": "text_pair", "datatype": "BYTES", "shape": [1], "data": [line["text_pair"]]})
    return request(json.dumps({"inputs": inputs}).encode())


def tensor(data, shape=(1,), name="text", datatype="BYTES"):
    return json.dumps({"inputs": [{"name": name, "datatype": datatype, "shape": list(shape), "data": data}]}).encode()


binary_header = json.dumps({"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1],
                                        "parameters": {"binary_data_size": 9}}]}).encode()
MALFORMED = [
    request(b"not json"),
    request(b'{"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": ["a"'),
    request(b""),
    request(tensor(["a", "b"], (3,))),
    request(tensor([1])),
    request(tensor(["a"], name="txt")),
    request(tensor(["a"], datatype="FP16")),
    request(tensor(["a"], (16777216, 16777216))),
    request(tensor([[[["a"]]]])),
    request(b"[" * 100000 + b"]" * 100000),
    request(b'{"inputs": [{"name": "text", "datatype": "BYTES", "shape": [1], "data": ["\xff\xfe"]}]}'),
    request(binary_header + struct.pack("<I", 5) + b"\xff\xfe\xfd\xfc\xfb",
            b"Inference-Header-Content-Length: " + str(len(binary_header)).encode() + b"\r\n"),
    request(binary_header + b"abc", b"Inference-Header-Content-Length: 99999999\r\n"),
    request(tensor(["a"] * 9, (9,))),
    request(b'{"inputs": 5}'),
    request(b'{"inputs": [], "id": 7}'),
    request(valid(0).split(b"\r\n\r\n", 1)[1], path=b"/v2/models/nope/infer"),
    b"GARBAGE\r\n\r\n",
    b"POST /v2/models/seq/infer HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\nConnection: close\r\n\r\n",
    b"POST /v2/models/seq/infer HTTP/1.1\r\nHost: x\r\nbroken header line\r\nConnection: close\r\n\r\n",
    request(b"x" * 1100000),
]


async def send(raw, timeout=120):
    reader, writer = await asyncio.wait_for(asyncio.open_connection(HOST, int(PORT)), timeout)
    writer.write(raw)
    await writer.drain()
    data = await asyncio.wait_for(reader.read(), timeout)
    writer.close()
    if not data:
        return 0, b""
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), body


def check_valid(k, status, body):
    assert status == 200, (k, status, body[:200])
    out = {o["name"]: o["data"] for o in json.loads(body)["outputs"]}
    r = ref[k % len(texts)]
    assert out["label"] == [r["label"]] and abs(out["score"][0] - r["score"]) < 1e-3, (k, out, r)


async def at_once(n):
    answers = await asyncio.gather(*(send(valid(k)) for k in range(n)))
    for k, (status, body) in enumerate(answers):
        check_valid(k, status, body)


async def mixed(malformed, counts):
    """`malformed` malformed requests with one valid one after every 10, 200 connections at a time."""
    gate = asyncio.Semaphore(200)

    async def one(k):
        async with gate:
            if k % 11 == 0:
                check_valid(k, *await send(valid(k)))
                return
            status, body = await send(MALFORMED[k % len(MALFORMED)])
            counts[status] = counts.get(status, 0) + 1
            assert 400 <= status < 500, (k % len(MALFORMED), status, body[:200])
            if status != 400 or body:  # the library's own 400 for a broken request line may come bare
                assert "error" in json.loads(body), body[:200]

    await asyncio.gather(*(one(k) for k in range(malformed * 11 // 10)))


async def main():
    # A warm-up of the same kinds first: the allocator's arenas (one per HTTP thread), pools and batch shapes settle.
    await at_once(1000)
    await mixed(2000, {})
    before = rss_mib()
    await at_once(1000)
    print("1000 connections at once: every one answered with joule infer's label", flush=True)
    counts = {}
    await mixed(10000, counts)
    assert sum(counts.values()) == 10000, counts
    after = rss_mib()
    print(f"10000 malformed requests ({', '.join(f'{n} x {s}' for s, n in sorted(counts.items()))}) among 1000 valid "
          "ones: every valid one answered correctly, every malformed one a 4xx")
    check_valid(1, *await send(valid(1)))
    print(f"resident memory {before:.0f} MiB after a warm-up of the same kinds, {after:.0f} MiB at the end "
          f"(bound: +{RSS_BOUND_MIB} MiB)")
    assert after - before <= RSS_BOUND_MIB, (before, after)


asyncio.run(main())
