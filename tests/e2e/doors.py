#!/usr/bin/env python3
"""The doors every command goes through, tried on every command of the table (`joule --list-commands`).

Each command declares its number and path flags (`joule COMMAND --describe-flags`); this test takes a valid command
line for each (BASELINES: a command without one fails the test, so a new command is tried as soon as it is added),
changes one flag at a time to a hostile value and asserts the refusal: exit code 1 or 2 within 60 s (no signal, no
hang), one joule error naming the flag or the path, a "what to do" line, no library's raw text, and the work directory
exactly as it was (checksums of every file, every link and special file). The classes (tests/e2e/README.md):
  number:  every number flag at 0, -1, 1e308, nan and just outside its range's edges (those its range refuses);
  output:  every output flag onto one of the command's inputs, a run's, a model's and a checkpoint's files, a FIFO, a
           symbolic link, a directory (or a file, for an output directory);
  input:   every input flag as a directory (a file, for a directory flag), a dangling link, a FIFO, an empty file,
           invalid UTF-8 and truncated JSON; model and run directories with a damaged config.json or summary.json,
           NaN weights, nothing inside.
Then what is not a refusal: an interrupted write leaves nothing behind; a thread count above the cores is capped and
said; an inference run's model path is read against its file.
usage: doors.py JOULE WORKDIR
"""
import hashlib
import json
import os
import shutil
import signal
import stat
import struct
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

JOULE, WORK = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
HERE = os.path.dirname(os.path.abspath(__file__))
FILES = os.path.join(WORK, "files")
# The thread environment each training or serving command would otherwise exec itself again to set (launch/runtime.h),
# set once here: each of the ~800 cases then loads LibTorch once, not twice (on a Zen 3 a serving command's second
# start costs 0.4-0.9 s, a training command's, before its libraries initialize, 0.25 s). It changes how idle threads
# wait, never what a command answers.
for name, value in (("OMP_WAIT_POLICY", "PASSIVE"), ("OPENBLAS_THREAD_TIMEOUT", "4")):
    os.environ.setdefault(name, value)
RAW = ("Exception raised from", "frame #", "[json.exception", "basic_filebuf", "filesystem error:", "toml::", "[error]",
       "std::bad_alloc", "what():")


def fail(message):
    print("FAIL: " + message)
    sys.exit(1)


def joule(*args, check=True, cwd=None, timeout=120, stdin=subprocess.DEVNULL):
    p = subprocess.run([JOULE, *args], cwd=cwd or FILES, stdin=stdin, capture_output=True, text=True, timeout=timeout,
                       errors="replace")
    if check and p.returncode != 0:
        fail(f"joule {' '.join(args)} exited {p.returncode}:\n{p.stdout}{p.stderr}")
    return p


def write_safetensors(path, tensors):
    """tensors: name -> (dtype, shape, bytes)."""
    header, offset, blob = {}, 0, b""
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blob += data
    h = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)) + h + blob)


def poison(model_dir, tensor):
    """A NaN as the first value of `tensor` in model_dir/model.safetensors."""
    path = os.path.join(model_dir, "model.safetensors")
    with open(path, "r+b") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        f.seek(8 + n + header[tensor]["data_offsets"][0])
        f.write(struct.pack("<f", float("nan")))


def make_fixture():
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(FILES)
    os.makedirs(os.path.join(WORK, "logs"))
    joule("data", "synth", "--out", "corpus.txt", "--documents", "40", "--seed", "5")
    joule("data", "vocab", "--input", "corpus.txt", "--out", "vocab.txt", "--size", "300")
    joule("data", "create", "--input", "corpus.txt", "--vocab", "vocab.txt", "--out", "shards", "--seq-len", "64",
          "--max-pred", "10", "--shards", "2", "--eval-documents", "8")
    with open(os.path.join(FILES, "run.toml"), "w") as f:
        f.write('[model]\nconfig = "bert-tiny"\n[data]\ntrain = "shards/train"\n[train]\nsteps = 2\nmicro_batch = 4\n'
                'threads = 1\n[checkpoint]\nevery_steps = 2\n')
    joule("train", "--config", "run.toml", "--run-dir", "run")
    joule("export", "--checkpoint", "run", "--out", "model")
    joule("model", "init", "--config", "bert-tiny", "--architecture", "BertForSequenceClassification", "--labels", "2",
          "--out", "seq")
    shutil.copy(os.path.join(FILES, "vocab.txt"), os.path.join(FILES, "seq"))
    texts = [l.strip() for l in open(os.path.join(FILES, "corpus.txt")) if l.strip()][:6]
    with open(os.path.join(FILES, "texts.jsonl"), "w") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"text": t, "id": i}) + "\n")
    ids = struct.pack("<16q", *([2] + [7] * 6 + [3]) * 2)
    write_safetensors(os.path.join(FILES, "inputs.safetensors"),
                      {"input_ids": ("I64", [2, 8], ids), "attention_mask": ("I64", [2, 8], struct.pack("<16q", *[1] * 16))})
    joule("bench", "infer", "--model", "seq", "--batches", "1", "--seconds", "0.01", "--seq-len", "16", "--out", "infrun")
    # The hostile things.
    os.chdir(FILES)
    os.mkfifo("fifo")
    os.makedirs("a_dir")
    os.makedirs("empty_dir")
    open("target.txt", "w").write("kept\n")
    os.symlink("target.txt", "link.txt")
    os.symlink("a_dir", "link_dir")
    os.symlink("gone", "dangling")
    open("empty.txt", "w").close()
    open("bad_utf8.txt", "wb").write(b"a line\n\xff\xfe not UTF-8\n")
    open("truncated.json", "w").write('{"architectures": ["Bert')
    for name, damage in (("cfg_truncated", b'{"hidden_size": 12'), ("cfg_utf8", b'{"model_type": "\xff"}')):
        shutil.copytree("seq", name)
        open(os.path.join(name, "config.json"), "wb").write(damage)
    shutil.copytree("seq", "nan_seq")
    poison("nan_seq", "classifier.weight")
    shutil.copytree("model", "nan_model")
    poison("nan_model", "bert.encoder.layer.0.attention.self.query.weight")
    for name, damage in (("run_truncated", b'{"schema_version": 4, "run'), ("run_utf8", b'{"run_id": "\xff"}')):
        shutil.copytree("run", name)
        open(os.path.join(name, "summary.json"), "wb").write(damage)
    shutil.copytree("infrun", "infrun_truncated")
    open("infrun_truncated/inference.json", "w").write('{"architecture": "Bert')
    shutil.copytree("infrun", "infrun_huge")  # figures no measurement gives: every figure read has a range
    result = json.load(open("infrun_huge/inference.json"))
    result["pue"] = 1e308
    json.dump(result, open("infrun_huge/inference.json", "w"))
    # A vocabulary of the same size with two tokens swapped, its shards and a model trained on them.
    words = open("vocab.txt").read().splitlines()
    words[-1], words[-2] = words[-2], words[-1]
    open("vocab_swap.txt", "w").write("\n".join(words) + "\n")
    joule("data", "create", "--input", "corpus.txt", "--vocab", "vocab_swap.txt", "--out", "swap_shards", "--seq-len",
          "64", "--max-pred", "10", "--eval-documents", "8")
    joule("train", "--config", "run.toml", "--run-dir", "swap_run", "--data", "swap_shards/train", "--steps", "1")
    # A run whose history is a FIFO; model inputs of the wrong shape, too long, with an id past the vocabulary; a tiny
    # LayoutLM classifier and a line without its boxes; a classifier whose vocab.txt lacks [PAD].
    shutil.copytree("run", "run_fifo")
    os.remove("run_fifo/metrics.jsonl")
    os.mkfifo("run_fifo/metrics.jsonl")
    i64 = lambda *v: struct.pack(f"<{len(v)}q", *v)
    write_safetensors("bad_shape.safetensors", {"input_ids": ("I64", [2, 8], i64(*[5] * 16)),
                                                "attention_mask": ("I64", [2, 7], i64(*[1] * 14))})
    write_safetensors("long.safetensors", {"input_ids": ("I64", [1, 600], i64(*[5] * 600)),
                                           "attention_mask": ("I64", [1, 600], i64(*[1] * 600))})
    write_safetensors("big_id.safetensors", {"input_ids": ("I64", [1, 4], i64(2, 5, 99999, 3)),
                                             "attention_mask": ("I64", [1, 4], i64(1, 1, 1, 1))})
    config = json.load(open(os.path.join(HERE, "..", "..", "configs", "models", "bert-tiny.json")))
    config.update(model_type="layoutlm", max_2d_position_embeddings=1024)
    json.dump(config, open("layout.json", "w"))
    joule("model", "init", "--config", "layout.json", "--architecture", "LayoutLMForTokenClassification", "--labels",
          "3", "--out", "layout")
    shutil.copy("vocab.txt", "layout")
    open("no_boxes.jsonl", "w").write('{"words": ["hello", "world"]}\n')
    for model, data in (("model", "shards/eval"), ("model", "shards/train"), ("swap_run/final", "swap_shards/eval")):
        joule("eval", "--model", model, "--data", data, "--max-batches", "1")  # the index cache reading them writes
    shutil.copytree("seq", "seq_nopad")
    open("seq_nopad/vocab.txt", "w").write("\n".join(w for w in words if w != "[PAD]") + "\n")


# A valid command line for every command (run once each, in a copy of the files, to prove it): one flag at a time is
# then made hostile. "stdin" commands read /dev/null.
BASELINES = {
    "train": "--config run.toml --run-dir new_run --set train.steps=1",
    "eval": "--model model --data shards/eval --max-batches 1",
    "export": "--checkpoint run --out new_model",
    "summary": "--run run",
    "report": "--run run --out new_report.html",
    "plan": "--nodes 2",
    "plan --inference": "--measured infrun",
    "version": "",
    "model init": "--config bert-tiny --out new_init",
    "model info": "--dir model",
    "model forward": "--dir seq --inputs inputs.safetensors --out new_forward.safetensors",
    "infer": "--model seq --input texts.jsonl --output new_out.jsonl",
    "serve": "--model seq --port 0 --check",
    "bench model": "--config bert-tiny --iterations 1 --warmup 0 --batch 2 --seq-len 16 --max-pred 2",
    "bench infer": "--model seq --batches 1 --seconds 0.01 --seq-len 16 --out new_infrun",
    "bench serve": "--model seq --rates 20 --seconds 0.2 --seq-len 16 --out new_servrun",
    "bench comm": "--gradient-model none --min-bytes 1024 --max-bytes 4096 --iterations 1",
    "bench data": "--data shards/train --batches 2 --warmup 0",
    "bench train": "--config bert-tiny --steps 1 --warmup 0 --micro-batch 2 --seq-len 16 --max-predictions 2",
    "data synth": "--out new_corpus.txt --documents 10",
    "data vocab": "--input corpus.txt --out new_vocab.txt --size 100",
    "data create": "--input corpus.txt --vocab vocab.txt --out new_shards --seq-len 64 --max-pred 10",
    "data pack": "--in shards --out new_packed --max-per-pack 3",
    "data inspect": "--data shards/train --vocab vocab.txt",
    "data tokenize": "--vocab vocab.txt",
    "data order": "--data shards/train --global-batch 4 --steps 2 --out new_order.json",
}
# Commands with a second mode selected by a flag: each mode declares its own flags.
MODES = {"plan": ["plan --inference"]}

# Hostile values of an input, by what the flag takes. A directory input's damaged directories are chosen by what it
# holds (a model, a run, an inference run).
FILE_INPUTS = ["a_dir", "dangling", "fifo", "empty.txt", "bad_utf8.txt", "truncated.json"]
DIR_INPUTS = ["target.txt", "dangling", "fifo", "empty_dir"]
PATH_INPUTS = ["dangling", "fifo", "empty_dir", "empty.txt", "truncated.json"]
MODEL_INPUTS = ["dangling", "fifo", "empty_dir", "empty.txt", "truncated.json", "bad_utf8.txt", "cfg_truncated",
                "cfg_utf8"]
DAMAGED_DIRS = {  # (command, flag) -> directories that hold that kind of input, damaged
    ("infer", "model"): ["cfg_truncated", "cfg_utf8", "nan_seq"],
    ("model forward", "dir"): ["cfg_truncated", "cfg_utf8", "nan_seq"],
    ("model info", "dir"): ["cfg_truncated", "cfg_utf8"],
    ("eval", "model"): ["cfg_truncated", "nan_model"],
    ("summary", "run"): ["run_truncated", "run_utf8"],
    ("report", "run"): ["run_truncated", "run_utf8", "infrun_truncated"],
    ("bench infer", "model"): ["cfg_truncated", "nan_seq"],
    ("bench serve", "model"): ["cfg_truncated", "cfg_utf8", "nan_seq"],
}
# Outputs onto what others own: a run's history, a model's config, a checkpoint's manifest.
OWNED_FILES = ["run/summary.json", "run/metrics.jsonl", "model/config.json",
               "run/checkpoints/step_00000002/manifest.json", "infrun/inference.json"]
OUTPUT_FILES = ["fifo", "link.txt", "a_dir"] + OWNED_FILES
OUTPUT_DIRS = ["fifo", "link_dir", "target.txt", "run", "shards", "model/config.json"]


def split(args):
    return args.split() if args else []


def describe(command):
    p = joule(*command.split(), "--describe-flags")
    flags = []
    for line in p.stdout.splitlines():
        kind, name, rest = line.split(" ", 2)
        flags.append((kind, name, rest))
    return flags


def parse_range(text):
    """'[1, 1048576]' or '(0, 1]' -> (lo, hi, lo_open, hi_open)."""
    lo_open, hi_open = text[0] == "(", text[-1] == ")"
    lo, hi = (float(x) for x in text[1:-1].split(","))
    return lo, hi, lo_open, hi_open


def number_text(v):
    return str(int(v)) if v == int(v) and abs(v) < 1e18 else repr(v)


def refused_numbers(range_text):
    lo, hi, lo_open, hi_open = parse_range(range_text)
    inside = lambda v: (lo < v if lo_open else lo <= v) and (v < hi if hi_open else v <= hi)
    candidates = [0, -1, 1e308, lo if lo_open else lo - 1, hi if hi_open else hi * 2]
    values = [number_text(v) for v in candidates if not inside(v)]
    return sorted(set(values), key=values.index) + ["nan"]


# Flags that exclude each other: the baseline's one goes when the other is tried.
EXCLUSIVE = {("model info", "config"): "dir", ("model info", "dir"): "config"}


def with_flag(command, args, name, value):
    """The baseline with --name set to value (replacing the baseline's own)."""
    out, i, found = [], 0, False
    drop = EXCLUSIVE.get((command, name))
    while i < len(args):
        if drop and args[i] == "--" + drop:
            i += 2
        elif args[i] == "--" + name:
            out += [args[i], value]
            i += 2
            found = True
        else:
            out.append(args[i])
            i += 1
    return out if found else out + ["--" + name, value]


HASHED = {}  # path -> ((size, mtime_ns, inode), checksum): a file is read again only when its stat changed


def snapshot():
    seen = {}
    for root, dirs, files in os.walk(FILES):
        for name in dirs + files:
            path = os.path.join(root, name)
            st = os.lstat(path)
            rel = os.path.relpath(path, FILES)
            if stat.S_ISREG(st.st_mode):
                key = (st.st_size, st.st_mtime_ns, st.st_ino)
                if HASHED.get(path, (None,))[0] != key:
                    HASHED[path] = (key, hashlib.sha256(open(path, "rb").read()).hexdigest())
                seen[rel] = HASHED[path][1]
            elif stat.S_ISLNK(st.st_mode):
                seen[rel] = "-> " + os.readlink(path)
            else:
                seen[rel] = stat.filemode(st.st_mode)[0]
        dirs[:] = [d for d in dirs if not os.path.islink(os.path.join(root, d))]
    return seen


# The thread environment joule would otherwise restart itself with (launch/runtime.h), set here so that each refusal
# costs one start, not two (the baselines run without it).
CASE_ENV = dict(os.environ, OMP_WAIT_POLICY="passive", OPENBLAS_THREAD_TIMEOUT="4")


def run_case(case):
    name, args, expect = case
    start = time.time()
    try:
        p = subprocess.run([JOULE, *args], cwd=FILES, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=60, errors="replace", env=CASE_ENV)
        rc, out = p.returncode, p.stdout + p.stderr
    except subprocess.TimeoutExpired as e:
        rc, out = 124, (e.stdout or b"").decode(errors="replace") + (e.stderr or b"").decode(errors="replace")
    return name, args, expect, rc, out, time.time() - start


def check_case(result):
    name, args, expect, rc, out, seconds = result
    line = "joule " + " ".join(args)
    errors = sorted({l[l.index("joule "):] for l in out.splitlines() if ": error: " in l and "joule " in l})
    problems = []
    if rc == 0:
        problems.append("exit code 0")
    elif rc == 124:
        problems.append("still running after 60 s (a hang)")
    elif rc < 0 or rc >= 128:
        problems.append(f"killed by signal {-rc if rc < 0 else rc - 128}")
    if len(errors) != 1:
        problems.append(f"{len(errors)} error lines")
    elif not any(e in errors[0] for e in expect):
        problems.append(f"the error names none of {expect}")
    if rc != 0 and "what to do: " not in out:
        problems.append("no 'what to do' line")
    raw = [r for r in RAW if r in out]
    if raw:
        problems.append(f"a library's raw text ({raw[0]})")
    return problems


def report(result, problems, log):
    name, args, expect, rc, out, seconds = result
    error = next((l for l in out.splitlines() if ": error: " in l), "")
    print(f"{name:<58} exit {rc:3d} {seconds:4.1f}s  {error[:150]}")
    if problems:
        log.append(f"{name}: joule {' '.join(args)}\n  " + "; ".join(problems) + "\n  output:\n" + out[-3000:])


# The examples that no flag iteration makes: name | arguments | texts the error must hold (any of them).
EXAMPLES = [
    ("example: report RUN --out RUN/summary.json", "report run --out run/summary.json", ["--out run/summary.json"]),
    ("example: infer --output = --input", "infer --model seq --input texts.jsonl --output texts.jsonl",
     ["is also the command's input --input texts.jsonl"]),
    ("example: infer --output MODEL/config.json", "infer --model seq --input texts.jsonl --output seq/config.json",
     ["lies inside --model seq"]),
    ("example: infer with NaN weights", "infer --model nan_seq --input texts.jsonl --output o.jsonl",
     ["tensor 'classifier.weight' holds 1 NaN or Inf value(s)"]),
    ("example: eval with NaN weights", "eval --model nan_model --data shards/eval", ["holds 1 NaN or Inf value(s)"]),
    ("example: train --pue 1e308", "train --config run.toml --run-dir r --pue 1e308", ["--pue 1e308"]),
    ("example: eval on shards of another vocabulary of the same size", "eval --model swap_run/final --data shards/eval",
     ["the shards were made with another vocabulary"]),
    ("example: train --model on another vocabulary of the same size",
     "train --config run.toml --run-dir r --model swap_run/final", ["was trained with another vocabulary"]),
    ("example: a FIFO as RUN/metrics.jsonl (was a stall)",
     "train --config run.toml --run-dir run_fifo --resume auto --steps 4", ["run_fifo/metrics.jsonl: is a FIFO"]),
    ("example: --profile FIFO (was a hang)", "bench infer --model seq --batches 1 --seconds 0.01 --profile fifo",
     ["fifo: is a FIFO"]),
    ("example: model forward, shapes that disagree",
     "model forward --dir seq --inputs bad_shape.safetensors --out f.safetensors", ["bad_shape.safetensors: "]),
    ("example: model forward, longer than the positions",
     "model forward --dir seq --inputs long.safetensors --out f.safetensors", ["long.safetensors: a length of 600"]),
    ("example: model forward, an id past the vocabulary",
     "model forward --dir seq --inputs big_id.safetensors --out f.safetensors", ["big_id.safetensors: input_ids holds"]),
    ("example: a LayoutLM line without boxes (was: key 'boxes' not found)",
     "infer --model layout --input no_boxes.jsonl --output o.jsonl", ['no_boxes.jsonl:1: no "boxes"']),
    ("example: summary of an inference run whose PUE is 1e308 (was 'inf' kWh)", "summary infrun_huge",
     ["infrun_huge/inference.json: 'pue' is 1e+308"]),
    ("example: report of it", "report infrun_huge --out huge.html", ["infrun_huge/inference.json: 'pue' is 1e+308"]),
    ("example: infer of a model whose vocab.txt lacks [PAD]", "infer --model seq_nopad --input texts.jsonl --output o.jsonl",
     ["seq_nopad/vocab.txt"]),
]


def temporaries(prefix):
    return [n for n in os.listdir(".") if n.startswith(prefix + ".tmp.")]


def interrupted(args, after, leftover_prefix):
    """Starts joule ARGS, sends SIGTERM after `after` seconds: the process dies of it and leaves no temporary."""
    p = subprocess.Popen([JOULE, *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(after)
    p.send_signal(signal.SIGTERM)
    rc = p.wait(timeout=60)
    left = temporaries(leftover_prefix)
    if rc != -signal.SIGTERM:
        fail(f"joule {' '.join(args)}: exit {rc} after SIGTERM at {after} s (expected to die of it: start it later?)")
    if left or os.path.exists(leftover_prefix):
        fail(f"joule {' '.join(args)} stopped by SIGTERM left {left or leftover_prefix}")
    print(f"   SIGTERM after {after} s: joule {args[0]} {args[1]}... died of it, nothing left")


def not_refusals():
    print("== an interrupted write leaves nothing behind")
    interrupted(["model", "init", "--config", "bert-base", "--out", "killed_model"], 2.0, "killed_model")
    interrupted(["data", "synth", "--out", "killed.txt", "--documents", "5000000"], 1.0, "killed.txt")
    with open("many.jsonl", "w") as f:
        line = open("texts.jsonl").readline()
        f.write(line * 20000)
    interrupted(["infer", "--model", "seq", "--input", "many.jsonl", "--output", "killed.jsonl", "--batch", "1"], 3.0,
                "killed.jsonl")
    dead = subprocess.Popen(["true"])
    dead.wait()
    open(f"again.txt.tmp.{dead.pid}", "w").write("what a killed run left")
    joule("data", "synth", "--out", "again.txt", "--documents", "10")
    if temporaries("again.txt"):
        fail("a rerun did not remove the temporary a killed process left: " + str(temporaries("again.txt")))
    print("   a killed process's again.txt.tmp.PID: removed by the next write of again.txt")
    p = subprocess.run(f"ulimit -f 2000; exec {JOULE} model init --config bert-tiny --out limited", shell=True,
                       capture_output=True, text=True)
    if p.returncode != 1 or "limited/model.safetensors: write failed: File too large" not in p.stderr or \
            os.path.exists("limited") or temporaries("limited"):
        fail(f"model init past ulimit -f: exit {p.returncode}\n{p.stderr}")
    print("   model init past `ulimit -f`: exit 1 naming limited/model.safetensors (was SIGXFSZ), nothing left")

    print("== --replace, and what the flags' doors let through")
    shutil.copytree("seq", "seq_copy")
    joule("model", "init", "--config", "bert-tiny", "--out", "seq_copy", "--replace")
    if os.path.exists("seq_copy/vocab.txt") or json.load(open("seq_copy/config.json"))["architectures"] != ["BertForPreTraining"]:
        fail("model init --replace did not replace the model directory whole")
    joule("bench", "infer", "--model", "seq", "--batches", "1", "--seconds", "0.01", "--seq-len", "16", "--out",
          "infrun", "--replace")
    p = joule("infer", "--model", "seq", "--input", "texts.jsonl", "--output", "capped.jsonl", "--threads", "4096")
    if "note: --threads 4096 is more than the" not in p.stderr:
        fail("--threads 4096 was not capped with a note:\n" + p.stderr)
    print("   --threads 4096: " + next(l for l in p.stderr.splitlines() if "--threads 4096" in l))
    open("u8.jsonl", "wb").write(b'{"text": "fine"}\n{"text": "bad \xff byte"}\n{"text": "ok", "id": "\xc3\xa9"}\n')
    joule("infer", "--model", "seq", "--input", "u8.jsonl", "--output", "u8_out.jsonl", "--skip-bad-lines")
    rows = [json.loads(l) for l in open("u8_out.jsonl", encoding="utf-8")]
    if [r["line"] for r in rows] != [1, 2, 3] or "not valid UTF-8" not in rows[1]["error"] or rows[2]["id"] != "\u00e9":
        fail(f"--skip-bad-lines over invalid UTF-8: {rows}")
    print("   --skip-bad-lines over a line of invalid UTF-8: the line is reported in its place (was no output at all)")
    shutil.copy(os.path.join(HERE, "..", "..", "configs", "hardware", "inference", "c5.xlarge.toml"), "a,b.toml")
    joule("plan", "--inference", "--instance", "a,b.toml")
    print("   plan --inference --instance a,b.toml: one profile file, its comma kept (was split at it)")
    os.makedirs("elsewhere", exist_ok=True)
    here = joule("plan", "--inference", "--measured", "infrun", "--json").stdout
    there = joule("plan", "--inference", "--measured", "../infrun", "--json", cwd=os.path.join(FILES, "elsewhere")).stdout
    def figures(text):  # every number of the plan, in order (the paths it quotes are as typed, so they differ)
        out = []
        walk = lambda j: [walk(v) for v in (j.values() if isinstance(j, dict) else j)] if isinstance(j, (dict, list)) \
            else out.append(j) if isinstance(j, (int, float)) and not isinstance(j, bool) else None
        walk(json.loads(text))
        return out
    if figures(here) != figures(there):
        fail("plan --inference --measured gives other figures from another directory")
    model = json.load(open("infrun/inference.json"))["model"]
    print(f"   inference.json's model is {model!r}, read against the file: the same plan from two directories")
    shutil.copytree("shards", "shards_copy")
    joule("train", "--config", "run.toml", "--run-dir", "copy_run", "--data", "shards_copy/train", "--eval-data",
          "shards/eval", "--steps", "1")
    print("   a copy of a data set's train/ with the original eval/: accepted (the split recorded them disjoint)")

    print("== a run's history is one history")
    joule("train", "--config", "run.toml", "--run-dir", "history", "--steps", "4", "--set", "train.log_every_steps=1",
          "--set", "checkpoint.every_steps=2")
    shutil.rmtree("history/checkpoints/step_00000004")
    lines = open("history/metrics.jsonl").read().splitlines()
    lines.insert(1, '{"step": 1, "sequ')
    open("history/metrics.jsonl", "w").write("\n".join(lines) + "\n")
    p = joule("train", "--config", "run.toml", "--run-dir", "history", "--steps", "6", "--resume", "auto", "--set",
              "train.log_every_steps=1", "--set", "checkpoint.every_steps=2")
    notes = [l for l in p.stdout.splitlines() if "history/metrics.jsonl: " in l]
    steps = [json.loads(l)["step"] for l in open("history/metrics.jsonl")]
    if steps != sorted(set(steps)) or len(notes) != 2:
        fail(f"the resumed history: steps {steps}, notes {notes}")
    joule("report", "history")
    print(f"   resumed at step 2: steps {steps} once each; " + "; ".join(n.split(": ", 2)[2] for n in notes))


def main():
    make_fixture()
    os.chdir(FILES)
    commands = [c for c in joule("--list-commands").stdout.splitlines()]
    commands += [m for c in commands for m in MODES.get(c, [])]
    missing = [c for c in commands if c not in BASELINES]
    if missing:
        fail(f"no baseline for {missing}: add a valid command line for it to BASELINES")
    print(f"== {len(commands)} commands and modes: every baseline runs (two at a time, each in a copy of the files)")

    def baseline(command):
        copy = os.path.join(WORK, "baseline", command.replace(" ", "_"))
        shutil.copytree(FILES, copy, symlinks=True, ignore=lambda d, names: [n for n in names if stat.S_ISFIFO(os.lstat(os.path.join(d, n)).st_mode)])
        p = joule(*command.split(), *split(BASELINES[command]), cwd=copy, check=False, timeout=300)
        shutil.rmtree(copy)
        return command, p

    with ThreadPoolExecutor(2) as pool:
        for command, p in pool.map(baseline, commands):
            if p.returncode != 0:
                fail(f"the baseline of '{command}' failed: joule {command} {BASELINES[command]}\n{p.stdout}{p.stderr}")
    shutil.rmtree(os.path.join(WORK, "baseline"))

    number_cases, path_cases = [], []
    for command in commands:
        base = command.split() + split(BASELINES[command])
        flags = describe(command)
        for kind, flag, rest in flags:
            if kind == "number":
                for value in refused_numbers(rest):
                    number_cases.append((f"number: {command} --{flag} {value}", with_flag(command, base, flag, value),
                                         [f"--{flag} {value}", f"--{flag} ({value}"]))
                continue
            path_kind, holds = rest.split()
            if path_kind == "output-file":
                given = dict(zip(base, base[1:]))
                inputs = [given["--" + f] for k, f, r in flags if k == "path" and r.startswith("input-") and "--" + f in given]
                values = OUTPUT_FILES + inputs
            elif path_kind == "output-dir":
                values = OUTPUT_DIRS
            elif path_kind == "input-file":
                values = FILE_INPUTS
            elif path_kind == "input-dir":
                values = DIR_INPUTS + DAMAGED_DIRS.get((command, flag), [])
            elif path_kind == "input-path":
                values = PATH_INPUTS
            else:  # input-model
                values = MODEL_INPUTS + DAMAGED_DIRS.get((command, flag), [])
            for value in dict.fromkeys(values):
                path_cases.append((f"{path_kind.split('-')[0]}: {command} --{flag} {value}",
                                   with_flag(command, base, flag, value), [value, f"--{flag}"]))

    example_cases = [(name, args.split(), expect) for name, args, expect in EXAMPLES]
    log = []
    before = snapshot()
    print(f"== {len(number_cases)} number cases (two at a time; the work directory compared after all of them)")
    with ThreadPoolExecutor(2) as pool:
        for result in pool.map(run_case, number_cases):
            report(result, check_case(result), log)
    after = snapshot()
    if after != before:
        changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
        log.append(f"number cases changed the work directory: {changed[:10]}")
    print(f"== {len(path_cases)} path cases and {len(example_cases)} examples (two at a time, of two commands where "
          "they can be; the work directory compared after each pair)")
    cases = path_cases + example_cases
    half = (len(cases) + 1) // 2
    pairs = [[cases[i]] + ([cases[i + half]] if i + half < len(cases) else []) for i in range(half)]
    with ThreadPoolExecutor(2) as pool:
        for pair in pairs:
            results = list(pool.map(run_case, pair))
            now = snapshot()
            changed = sorted(k for k in set(before) | set(now) if before.get(k) != now.get(k))
            for k in changed:  # put things back for the next pair
                path = os.path.join(FILES, k)
                if k not in before:
                    shutil.rmtree(path) if os.path.isdir(path) and not os.path.islink(path) else os.remove(path)
            if changed:
                before = snapshot()
            for result in results:
                problems = check_case(result)
                if changed:
                    beside = [r[0] for r in results if r is not result]
                    problems.append(f"files changed: {changed[:10]} (by this case" +
                                    (f" or '{beside[0]}', run beside it)" if beside else ")"))
                report(result, problems, log)
    vocab_hint = run_case(("", "infer --model seq_nopad --input texts.jsonl --output o.jsonl".split(), []))[4]
    if "--vocab" in vocab_hint:
        log.append("infer's advice names --vocab, which infer does not have:\n" + vocab_hint)
    if log:
        print("\n".join(log))
        fail(f"{len(log)} of {len(number_cases) + len(path_cases) + len(example_cases)} cases")
    cases = len(number_cases) + len(path_cases) + len(example_cases)
    not_refusals()
    print(f"PASS ({cases} refusals: {len(number_cases)} number cases, {len(path_cases)} path cases over "
          f"{len(commands)} commands, {len(example_cases)} examples; then what is not a refusal)")


if __name__ == "__main__":
    main()
