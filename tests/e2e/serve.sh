#!/usr/bin/env bash
# joule serve end to end, with real clients (curl, Python's urllib, tritonclient[http]: an independent Open Inference
# Protocol v2 client):
#  1. health, readiness, server and model metadata; --check starts, binds and exits 0;
#  2. every line of a JSONL file sent as its own request, 8 at a time: the answers equal `joule infer`'s for the same
#     lines (labels equal, scores within 1e-3: a line shares its batch with others), over JSON and over tritonclient's
#     binary tensor data;
#  3. bad requests get 4xx with a JSON error naming the input (bad JSON, an unknown input, a wrong shape, a body over
#     --max-body-bytes, a POST without a length, an unknown model) and the server keeps serving; /metrics counts them
#     by kind;
#  4. a full queue answers 503 with Retry-After, and the request it already took still gets its answer;
#  5. SIGTERM with requests queued: every one of them is answered, new connections are refused, exit 0;
#  6. a port in use is a start-up error naming the address;
#  7. a LayoutLM token classifier's answers equal joule infer's;
#  8. 1,000 connections at once, 10,000 malformed requests among 1,000 valid ones (serve_load.py): every valid one
#     answered correctly, every malformed one a 4xx, resident memory within +64 MiB of a warm-up's.
# usage: serve.sh JOULE WORKDIR   (tritonclient: the venv tools/setup.sh --tests makes, JOULE_TRITONCLIENT_VENV)
set -euo pipefail
joule=$1 work=$2
mpiexec=unused
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../support/e2e_setup.sh"
client_python=${JOULE_TRITONCLIENT_VENV:-$HOME/.cache/joule/venv-tritonclient}/bin/python
[[ -x $client_python ]] || fail "no $client_python: bash tools/setup.sh --tests makes it (tritonclient[http] from PyPI)"
e2e_workdir "$work"
e2e_make_data 40 5 400

# status URL_PATH [CURL ARGS...]: the HTTP status; the body is in body.json.
status() {
  local path=$1
  shift
  curl -s -o body.json -w '%{http_code}' "$@" "$url$path"
}

echo "== 0. the models and joule infer's answers"
e2e_make_classifiers
"$joule" infer --model seq --input texts.jsonl --output ref.jsonl > /dev/null || fail "joule infer"
"$joule" infer --model layout --input forms.jsonl --output forms_ref.jsonl > /dev/null || fail "joule infer layout"

echo "== 1. health and metadata"
"$joule" serve --model seq --port 0 --check > check.log 2>&1 || { cat check.log; fail "--check"; }
grep -q "serving seq (BertForSequenceClassification) on http://127.0.0.1:" check.log || { cat check.log; fail "check"; }
e2e_serve seq --model seq --max-batch 8 --max-queue-delay-ms 2
for path in /v2/health/live /v2/health/ready /v2 /v2/models/seq /v2/models/seq/ready; do
  [[ $(status "$path") == 200 ]] || { cat body.json; fail "GET $path"; }
done
grep -q '"max_batch_size":8' body.json || status /v2/models/seq > /dev/null
status /v2/models/seq > /dev/null
grep -q '"name":"text"' body.json || { cat body.json; fail "model metadata"; }
[[ $(status /v2/models/other) == 404 ]] || fail "an unknown model is not 404"

echo "== 2. answers equal joule infer's: urllib, curl, tritonclient"
cat > compare.py <<'PY'
"""compare.py URL MODE REF INPUT: each line of INPUT as its own request, 8 at a time; the answers against REF."""
import json, sys, urllib.request
from concurrent.futures import ThreadPoolExecutor
url, mode, ref_path, input_path = sys.argv[1:5]
ref = [json.loads(l) for l in open(ref_path)]
lines = [json.loads(l) for l in open(input_path)]

def tensor(name, datatype, shape, data):
    return {"name": name, "datatype": datatype, "shape": shape, "data": data}

def over_json(line):
    if "words" in line:
        inputs = [tensor("words", "BYTES", [1, len(line["words"])], line["words"]),
                  tensor("boxes", "INT64", [len(line["boxes"]), 4], line["boxes"]),
                  tensor("page", "FP32", [2], line["page"])]
    else:
        inputs = [tensor("text", "BYTES", [1], [line["text"]])]
        if "text_pair" in line:
            inputs.append(tensor("text_pair", "BYTES", [1, 1], [[line["text_pair"]]]))
    body = json.dumps({"id": "req", "inputs": inputs}).encode()
    r = urllib.request.urlopen(urllib.request.Request(url + "/v2/models/" + model + "/infer", data=body), timeout=60)
    out = json.loads(r.read())
    assert out["id"] == "req" and out["model_name"] == model, out
    return {o["name"]: o["data"] for o in out["outputs"]}

def over_tritonclient(line):
    import numpy as np
    import tritonclient.http as http
    client = http.InferenceServerClient(url[len("http://"):])
    inputs = []
    for name in ("text", "text_pair"):
        if name in line:
            t = http.InferInput(name, [1], "BYTES")
            t.set_data_from_numpy(np.array([line[name]], dtype=object))  # binary tensor data, the client's default
            inputs.append(t)
    r = client.infer(model, inputs)
    return {"label": [x.decode() if isinstance(x, bytes) else x for x in r.as_numpy("label").tolist()],
            "score": r.as_numpy("score").tolist()}

model = "layout" if "words" in lines[0] else "seq"
if mode == "tritonclient":
    import tritonclient.http as http
    client = http.InferenceServerClient(url[len("http://"):])
    assert client.is_server_live() and client.is_server_ready() and client.is_model_ready(model)
    meta = client.get_model_metadata(model)
    assert [i["name"] for i in meta["inputs"]] == ["text", "text_pair"], meta
with ThreadPoolExecutor(8) as pool:
    answers = list(pool.map(over_tritonclient if mode == "tritonclient" else over_json, lines))
worst = 0.0
for i, (a, r) in enumerate(zip(answers, ref)):
    if "label" in r:
        assert a["label"] == [r["label"]], (i, a, r)
        worst = max(worst, abs(a["score"][0] - r["score"]))
    else:
        labels = [l if l is not None else "" for l in r["labels"]]
        assert a["labels"] == labels, (i, a, r)  # [1, W], flat in row-major order
        worst = max([worst] + [abs(x - (y or 0)) for x, y in zip(a["scores"], r["scores"])])
assert worst < 1e-3, worst
print(f"{len(lines)} requests over {mode}: labels equal joule infer's, scores within {worst:.1e}")
PY
python3 compare.py "$url" json ref.jsonl texts.jsonl || fail "the answers over JSON"
"$client_python" compare.py "$url" tritonclient ref.jsonl texts.jsonl || fail "the answers over tritonclient"
line=$(head -n 1 texts.jsonl)
python3 -c 'import json,sys; l=json.loads(sys.argv[1]); print(json.dumps({"inputs": [
  {"name": "text", "datatype": "BYTES", "shape": [1], "data": [l["text"]]},
  {"name": "text_pair", "datatype": "BYTES", "shape": [1], "data": [l["text_pair"]]}]}))' "$line" > one.json
[[ $(status /v2/models/seq/infer -X POST -H 'Content-Type: application/json' --data-binary @one.json) == 200 ]] ||
  { cat body.json; fail "curl"; }
python3 -c 'import json; a=json.load(open("body.json")); r=json.loads(open("ref.jsonl").readline())
assert a["outputs"][0]["data"] == [r["label"]] and abs(a["outputs"][1]["data"][0] - r["score"]) < 1e-3, (a, r)' ||
  fail "the curl answer differs from joule infer's"
echo "curl: the first line's answer equals joule infer's"

echo "== 3. bad requests: 4xx with a JSON error, and the server keeps serving"
expect_error() {  # CODE WORDS CURL_ARGS...
  local code=$1 words=$2
  shift 2
  local got
  got=$(status /v2/models/seq/infer -X POST "$@")
  [[ $got == "$code" ]] || { cat body.json; fail "expected $code, got $got: $words"; }
  python3 -c 'import json,sys; e=json.load(open("body.json"))["error"]; assert sys.argv[1] in e, e' "$words" ||
    fail "the $code error does not say '$words': $(cat body.json)"
}
expect_error 400 "not JSON" --data-binary '{"inputs": ['
expect_error 400 "input 'txt' is not one of seq's" --data-binary \
  '{"inputs": [{"name": "txt", "datatype": "BYTES", "shape": [1], "data": ["a"]}]}'
expect_error 400 "shape [2] holds 2 elements, \"data\" has 1" --data-binary \
  '{"inputs": [{"name": "text", "datatype": "BYTES", "shape": [2], "data": ["a"]}]}'
expect_error 400 "holds 9 examples; this server takes at most 8" --data-binary \
  '{"inputs": [{"name": "text", "datatype": "BYTES", "shape": [9], "data": ["a","b","c","d","e","f","g","h","i"]}]}'
head -c 1100000 /dev/zero | tr '\0' 'a' > big.txt
expect_error 413 "larger than --max-body-bytes 1048576" --data-binary @big.txt
# A POST with neither Content-Length nor chunked encoding (curl -X POST without data sends none): answered at once,
# not after the server's 10 s read timeout (cpp-httplib would read such a body until the client closed).
expect_error 411 "needs a Content-Length header" --max-time 5
[[ $(status /v2/models/nope/infer -X POST --data-binary @one.json) == 404 ]] || fail "an unknown model's infer"
[[ $(status /v2/models/seq/infer -X POST --data-binary @one.json) == 200 ]] || fail "no answer after the bad requests"
curl -s "$url/metrics" > metrics.txt
for want in 'joule_request_errors_total{kind="bad_request"} 4' 'joule_request_errors_total{kind="too_large"} 1' \
  'joule_request_errors_total{kind="no_length"} 1' \
  'joule_requests_total{code="200"} 62' 'joule_inferences_total 62' '# TYPE joule_request_seconds histogram' \
  'joule_energy_joules_total{component="cpu",source="model"}'; do
  grep -qF "$want" metrics.txt || { grep -v '^#' metrics.txt | grep -v bucket; fail "/metrics lacks '$want'"; }
done
echo "400 x4, 411, 413 and 404 answered with JSON errors; /metrics counts them; the server still answers"

echo "== 4. a full queue answers 503"
port_in_use=${url##*:}
e2e_serve full --model seq --max-batch 4 --max-queue 4 --max-queue-delay-ms 4000
curl -s -o waiting.json -w '%{http_code}' -X POST --data-binary @one.json "$url/v2/models/seq/infer" > waiting.code &
waiter=$!
until curl -s "$url/metrics" | grep -q '^joule_queue_examples 1$'; do sleep 0.05; done
code=$(curl -s -D headers.txt -o body.json -w '%{http_code}' -X POST --data-binary \
  '{"inputs": [{"name": "text", "datatype": "BYTES", "shape": [4], "data": ["a","b","c","d"]}]}' "$url/v2/models/seq/infer")
[[ $code == 503 ]] || { cat body.json; fail "a full queue answered $code"; }
grep -qi '^Retry-After: 1' headers.txt || fail "503 without Retry-After"
grep -q "overloaded: the queue holds 1 examples (at most 4)" body.json || { cat body.json; fail "503's error"; }
wait $waiter
[[ $(cat waiting.code) == 200 ]] || fail "the queued request was not answered"
echo "503 with Retry-After while the queue is full; the queued request answered 200"

echo "== 5. SIGTERM drains the queue and exits 0"
e2e_serve drain --model seq --max-queue-delay-ms 3000
clients=()
for k in 1 2 3; do
  curl -s -o "drain$k.json" -w '%{http_code}' -X POST --data-binary @one.json "$url/v2/models/seq/infer" \
    > "drain$k.code" &
  clients+=($!)
done
until curl -s "$url/metrics" | grep -q '^joule_queue_examples 3$'; do sleep 0.05; done
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
[[ $rc == 0 ]] || { cat drain.log; fail "joule serve exited $rc after SIGTERM"; }
wait "${clients[@]}"
for k in 1 2 3; do [[ $(cat "drain$k.code") == 200 ]] || fail "queued request $k got $(cat "drain$k.code")"; done
grep -q "SIGTERM: stopping: no new connections; answering the 3 examples queued" drain.log || { cat drain.log; fail "log"; }
if curl -s -o /dev/null "$url/v2/health/live"; then fail "a connection after SIGTERM's drain was accepted"; fi
echo "3 queued requests answered after SIGTERM, exit 0, no new connections"

echo "== 6. a port in use"
if "$joule" serve --model seq --port "$port_in_use" > inuse.log 2>&1; then fail "a port in use was accepted"; fi
grep -q "cannot listen on 127.0.0.1:$port_in_use: Address already in use" inuse.log || { cat inuse.log; fail "in use"; }
grep -q "what to do: another process holds that port" inuse.log || { cat inuse.log; fail "in use hint"; }

echo "== 7. LayoutLM over the protocol"
e2e_serve layout --model layout
python3 compare.py "$url" json forms_ref.jsonl forms.jsonl || fail "LayoutLM's answers"

echo "== 8. 1,000 connections at once, 10,000 malformed requests"
e2e_serve load --model seq --max-queue 2048
python3 "$here/serve_load.py" "$url" "$pid" ref.jsonl texts.jsonl || fail "under load"
kill -TERM "$pid"
wait "$pid" || fail "joule serve did not exit 0 after the load"
echo "serve: OK"
