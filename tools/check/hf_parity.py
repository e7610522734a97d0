#!/usr/bin/env python3
"""joule's inference models against HuggingFace transformers, class by class.

For each of BertModel, BertForSequenceClassification, BertForTokenClassification, LayoutLMModel,
LayoutLMForSequenceClassification and LayoutLMForTokenClassification: a randomly initialised model saved by
`transformers` (save_pretrained, safetensors) runs in transformers (fp32, eval) and in `joule model forward` on the
same inputs (padding in one row, two segments, LayoutLM boxes in the 0-1000 space); the logits (or, for the encoder
alone, the hidden and pooled states) must agree within --fp32-tol in fp32 and --bf16-tol (of the output's scale) in
joule's bf16. Then a BertForPreTraining directory (what a joule run writes to final/) loads as the encoder of a
BertForSequenceClassification: its hidden and pooled states equal transformers' and joule says the classifier was
initialised.

Runs with pyenv's python3 (torch 2.x and transformers from PyPI), outside CI:
    python3 tools/check/hf_parity.py build/ci/tools/joule [--keep DIR]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
import transformers
from safetensors.torch import load_file, save_file

CLASSES = ["BertModel", "BertForSequenceClassification", "BertForTokenClassification", "LayoutLMModel",
           "LayoutLMForSequenceClassification", "LayoutLMForTokenClassification"]
LABELS = ["O", "B-KEY", "I-KEY"]
BATCH, LENGTH, VOCAB = 3, 16, 120


def config_for(name):
    common = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                  max_position_embeddings=64, type_vocab_size=2, hidden_act="gelu", hidden_dropout_prob=0.1,
                  attention_probs_dropout_prob=0.1, layer_norm_eps=1e-12, initializer_range=0.2,
                  id2label=dict(enumerate(LABELS)), label2id={l: i for i, l in enumerate(LABELS)})
    if name.startswith("LayoutLM"):
        return transformers.LayoutLMConfig(max_2d_position_embeddings=1024, **common)
    return transformers.BertConfig(**common)


def inputs(seed):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, VOCAB, (BATCH, LENGTH), generator=g)
    ids[:, 0] = 2  # [CLS]
    mask = torch.ones(BATCH, LENGTH, dtype=torch.long)
    mask[1, 11:] = 0  # padding in one row
    ids[1, 11:] = 0
    types = torch.zeros(BATCH, LENGTH, dtype=torch.long)
    types[:, LENGTH // 2:] = 1
    x0 = torch.randint(0, 900, (BATCH, LENGTH), generator=g)
    y0 = torch.randint(0, 900, (BATCH, LENGTH), generator=g)
    bbox = torch.stack([x0, y0, x0 + torch.randint(0, 100, (BATCH, LENGTH), generator=g),
                        y0 + torch.randint(0, 100, (BATCH, LENGTH), generator=g)], dim=-1)
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types, "bbox": bbox}


def hf_outputs(model, x, layout):
    args = {k: v for k, v in x.items() if layout or k != "bbox"}
    with torch.no_grad():
        out = model(**args, output_hidden_states=True)
    got = {}
    if hasattr(out, "logits"):
        got["logits"] = out.logits
    hidden = out.last_hidden_state if hasattr(out, "last_hidden_state") else out.hidden_states[-1]
    got["hidden"] = hidden
    if getattr(out, "pooler_output", None) is not None:
        got["pooled"] = out.pooler_output
    return got


def joule_outputs(joule, model_dir, x, work, precision, architecture=None):
    inp, out = os.path.join(work, "inputs.safetensors"), os.path.join(work, f"out_{precision}.safetensors")
    save_file({k: v.contiguous() for k, v in x.items()}, inp)
    cmd = [joule, "model", "forward", "--dir", model_dir, "--inputs", inp, "--out", out, "--precision", precision]
    if architecture:
        cmd += ["--architecture", architecture]
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"joule model forward failed ({run.returncode}):\n{run.stdout}{run.stderr}")
    return load_file(out), run.stdout


def compare(what, ref, got, keys, tol, relative):
    worst = 0.0
    for k in keys:
        a, b = ref[k].float(), got[k].float()
        if a.shape != b.shape:
            sys.exit(f"FAIL {what}: {k} has shape {tuple(b.shape)} in joule, {tuple(a.shape)} in transformers")
        d = (a - b).abs().max().item()
        if relative:
            d /= a.abs().max().item() + 1e-12
        worst = max(worst, d)
    ok = worst <= tol
    print(f"{'ok  ' if ok else 'FAIL'} {what}: max {'relative ' if relative else ''}difference {worst:.3g} "
          f"(tolerance {tol:g}) over {', '.join(keys)}")
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("joule")
    ap.add_argument("--fp32-tol", type=float, default=1e-4)
    ap.add_argument("--bf16-tol", type=float, default=5e-2)
    ap.add_argument("--keep", help="keep the model directories here")
    a = ap.parse_args()
    joule = os.path.abspath(a.joule)
    work = a.keep or tempfile.mkdtemp(prefix="hf_parity_")
    os.makedirs(work, exist_ok=True)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}; models in {work}")
    bf16 = any(f in open("/proc/cpuinfo").read() for f in ("avx512_bf16", "amx_bf16"))
    ok = True
    for i, name in enumerate(CLASSES):
        torch.manual_seed(i)
        model = getattr(transformers, name)(config_for(name)).eval()
        d = os.path.join(work, name)
        model.save_pretrained(d, safe_serialization=True)
        x = inputs(100 + i)
        layout = name.startswith("LayoutLM")
        ref = hf_outputs(model, x, layout)
        keys = ["logits"] if "logits" in ref else sorted(ref)
        got, _ = joule_outputs(joule, d, x, work, "fp32")
        ok &= compare(f"{name} fp32", ref, got, keys, a.fp32_tol, relative=False)
        if bf16:
            got, _ = joule_outputs(joule, d, x, work, "bf16")
            ok &= compare(f"{name} bf16", ref, got, keys, a.bf16_tol, relative=True)
    # A pretraining directory (a joule run's final/) as the encoder of a sequence classifier.
    pre = os.path.join(work, "BertForPreTraining")
    torch.manual_seed(7)
    transformers.BertForPreTraining(config_for("BertForPreTraining")).eval().save_pretrained(pre, safe_serialization=True)
    with open(os.path.join(pre, "config.json")) as f:
        cfg = json.load(f)
    for k in ("id2label", "label2id"):
        cfg.pop(k, None)
    with open(os.path.join(pre, "config.json"), "w") as f:
        json.dump(cfg, f)
    encoder = transformers.BertModel.from_pretrained(pre).eval()
    x = inputs(200)
    ref = hf_outputs(encoder, x, False)
    got, said = joule_outputs(joule, pre, x, work, "fp32", "BertForSequenceClassification")
    ok &= compare("BertForPreTraining directory as a BertForSequenceClassification's encoder", ref, got,
                  ["hidden", "pooled"], a.fp32_tol, relative=False)
    if "classifier.weight" not in said or "initialized" not in said:
        print(f"FAIL the initialised classifier is not said:\n{said}")
        ok = False
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
