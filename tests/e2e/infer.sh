#!/usr/bin/env bash
# joule infer end to end: a sequence classifier, a token classifier and a LayoutLM token classifier over JSONL files.
#  1. one output line per input line, in input order, ids echoed, labels from config.json's id2label;
#  2. the same input gives the same output (byte for byte), and another batch size the same labels;
#  3. bad lines: refused by default naming FILE:LINE, with no output file written; with --skip-bad-lines each is
#     reported on stderr and stands in the output as {"line": N, "error": ...} in its place;
#  4. LayoutLM: words with pixel boxes and the page size, one label per word; a box outside the page is a bad line.
# usage: infer.sh JOULE WORKDIR
set -euo pipefail
joule=$1 work=$2
mpiexec=unused
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../support/e2e_setup.sh"
e2e_workdir "$work"
e2e_make_data 40 5 400

echo "== 1. a sequence classifier"
e2e_make_classifiers
"$joule" infer --model seq --input texts.jsonl --output out1.jsonl --batch 8 > infer1.log || { cat infer1.log; fail "infer"; }
grep -q "30 lines -> out1.jsonl: 30 inferred, 0 skipped" infer1.log || { cat infer1.log; fail "the summary line"; }
python3 - <<'PY' || fail "the output lines"
import json
rows = [json.loads(l) for l in open("out1.jsonl")]
assert [r["line"] for r in rows] == list(range(1, 31)), [r["line"] for r in rows]
assert [r["id"] for r in rows] == [f"doc-{i}" for i in range(30)]
assert all(r["label"] in ("neg", "neutral", "pos") and 0 < r["score"] <= 1 for r in rows), rows[:3]
print("30 lines in order; labels", sorted({r["label"] for r in rows}))
PY

echo "== 2. reproducible"
"$joule" infer --model seq --input texts.jsonl --output out2.jsonl --batch 8 > /dev/null || fail "infer again"
cmp out1.jsonl out2.jsonl || fail "the same input gave another output"
"$joule" infer --model seq --input texts.jsonl --output out3.jsonl --batch 1 > /dev/null || fail "infer batch 1"
python3 - <<'PY' || fail "batch 1 and batch 8 disagree"
import json
a = [json.loads(l) for l in open("out1.jsonl")]
b = [json.loads(l) for l in open("out3.jsonl")]
assert [r["label"] for r in a] == [r["label"] for r in b]
assert max(abs(x["score"] - y["score"]) for x, y in zip(a, b)) < 1e-3
PY

echo "== 3. bad lines"
{ head -n 4 texts.jsonl; echo 'not json'; echo '{"txt": "a key typo"}'; sed -n 5,6p texts.jsonl; echo '{"text": 5}';
  echo; tail -n 2 texts.jsonl; } > bad.jsonl
if "$joule" infer --model seq --input bad.jsonl --output bad_out.jsonl > bad.log 2>&1; then fail "bad lines accepted"; fi
grep -q "bad.jsonl:5: not JSON" bad.log || { cat bad.log; fail "the refusal does not name the line"; }
[[ ! -e bad_out.jsonl ]] || fail "a refused file left an output"
"$joule" infer --model seq --input bad.jsonl --output bad_out.jsonl --skip-bad-lines > skip.log 2> skip.err ||
  { cat skip.log skip.err; fail "--skip-bad-lines"; }
grep -q "skipped bad.jsonl:6: no \"text\"" skip.err || { cat skip.err; fail "a skipped line is not reported"; }
python3 - <<'PY' || fail "the skipped lines' places"
import json
rows = [json.loads(l) for l in open("bad_out.jsonl")]
assert [r["line"] for r in rows] == [1, 2, 3, 4, 5, 6, 7, 8, 9, 11, 12], [r["line"] for r in rows]
errors = {r["line"]: r["error"] for r in rows if "error" in r}
assert sorted(errors) == [5, 6, 9], errors
assert "\"text\" must be a string" in errors[9], errors
print("skipped lines 5, 6, 9 stand in their places; the blank line 10 is no line")
PY

echo "== 4. a token classifier and LayoutLM"
"$joule" model init --config bert-tiny --architecture BertForTokenClassification --labels 4 --out tok > /dev/null ||
  fail "model init token"
cp vocab.txt tok/
"$joule" infer --model tok --input texts.jsonl --output tok.jsonl > /dev/null || fail "token infer"
python3 - <<'PY' || fail "token labels"
import json
rows = [json.loads(l) for l in open("tok.jsonl")]
assert all(len(r["tokens"]) == len(r["labels"]) == len(r["scores"]) > 0 for r in rows), rows[0]
PY
{ cat forms.jsonl; echo '{"words": ["total"], "boxes": [[600, 10, 700, 20]], "page": [612, 792]}'; } > forms11.jsonl
if "$joule" infer --model layout --input forms11.jsonl --output forms_out.jsonl > layout_bad.log 2>&1; then
  fail "a box outside the page was accepted"
fi
grep -q 'forms11.jsonl:11: box 0 (word "total") lies outside the page' layout_bad.log || { cat layout_bad.log; fail "box"; }
"$joule" infer --model layout --input forms.jsonl --output forms_out.jsonl > layout.log || { cat layout.log; fail "layoutlm"; }
python3 - <<'PY' || fail "LayoutLM labels per word"
import json
src = [json.loads(l) for l in open("forms.jsonl")]
rows = [json.loads(l) for l in open("forms_out.jsonl")]
assert len(rows) == 10
for s, r in zip(src, rows):
    assert len(r["labels"]) == len(s["words"]) and all(l is not None for l in r["labels"]), (s, r)
print("LayoutLM: one label per word for 10 forms")
PY
echo "== 5. refused before any work"
refused() {  # NAME EXPECTED ARGS...
  local name=$1 expect=$2
  shift 2
  if "$joule" infer "$@" > "$name.log" 2>&1; then fail "$name: accepted"; fi
  grep -qF -- "$expect" "$name.log" || { cat "$name.log"; fail "$name: the error does not say '$expect'"; }
}
refused no_dir "missing/out.jsonl" --model seq --input texts.jsonl --output missing/out.jsonl
refused short "--max-length 2 leaves no room for text" --model seq --input texts.jsonl --output o.jsonl --max-length 2
"$joule" model init --config bert-tiny --out pre > /dev/null || fail "model init pretraining"
cp vocab.txt pre/
refused untrained "pre lacks classifier.bias, classifier.weight: its labels would come from random weights" \
  --model pre --architecture BertForSequenceClassification --input texts.jsonl --output o.jsonl
"$joule" infer --model pre --architecture BertForSequenceClassification --allow-untrained-head --input texts.jsonl \
  --output untrained.jsonl > untrained.log || { cat untrained.log; fail "--allow-untrained-head"; }
grep -q "note: pre has no classifier.bias, classifier.weight: initialized" untrained.log || { cat untrained.log; fail "note"; }
python3 - <<'PY'
import json
c = json.load(open("seq/config.json"))
c["vocab_size"] = 100
json.dump(c, open("small.json", "w"))
PY
"$joule" model init --config small.json --architecture BertForSequenceClassification --out small > /dev/null ||
  fail "model init small"
cp vocab.txt small/
refused vocab "small/vocab.txt has 400 tokens, more than the model's vocab_size 100" --model small --input texts.jsonl \
  --output o.jsonl
[[ ! -e o.jsonl ]] || fail "a refused run left an output"

echo "== 6. joule bench infer"
"$joule" bench infer --model seq --batches 1,3 --seq-len 16 --seconds 0.2 --p99-ms 100000 --json > bench.json ||
  fail "bench infer"
python3 - <<'PY' || fail "bench infer's JSON"
import json, platform
j = json.loads(open("bench.json").read())
assert j["architecture"] == "BertForSequenceClassification" and [p["batch"] for p in j["points"]] == [1, 3], j
for p in j["points"]:
    assert p["inferences_per_s"] > 0 and 0 < p["p50_ms"] <= p["p99_ms"] and p["kwh_per_million"] > 0, p
    assert 0 < p["roofline_fraction"] < 1, p  # the probe times the calls the model makes: no model beats it
    if platform.machine() == "x86_64":  # the clock is measured there: the processor's peak bounds every rate
        assert 0 < p["peak_fraction"] <= p["roofline_fraction"], (p, j["sgemm_gflops"], j["peak_gflops"])
assert j["chosen_batch"] in (1, 3)
print("bench infer:", {p["batch"]: (round(p["inferences_per_s"], 1), round(p["roofline_fraction"], 2)) for p in j["points"]})
PY
echo "PASS"
