#!/usr/bin/env python3
"""The HuggingFace round trip of a joule model directory, both ways, in fp32 on one batch.

  1. joule -> HF: `BertForPreTraining.from_pretrained(MODEL)` loads joule's directory; its logits and losses on the
     first batch of DATA equal those of `joule eval --dump` (same weights, same batch) within --tolerance.
  2. HF -> joule: a BertForPreTraining of MODEL's config with fresh weights (seed 0), saved by HF's save_pretrained,
     loads into `joule eval`, whose logits and losses on the same batch equal HF's within --tolerance.

Needs the transformers and safetensors packages (pyenv's python3 here; the GPU image has them). Writes
OUT/hf_roundtrip.json and exits 1 when a figure is off.

  python3 tools/device/hf_roundtrip.py --joule build/ci/tools/joule --model RUN/final --data SHARDS/eval --out DIR
"""
import argparse
import json
import os
import subprocess
import sys

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from transformers import BertConfig, BertForPreTraining


def joule_dump(joule, model_dir, data, batch, path):
    """joule eval's first batch, logits and losses (fp32) on MODEL_DIR."""
    cmd = [joule, "eval", "--model", model_dir, "--data", data, "--batch", str(batch), "--max-batches", "1",
           "--precision", "fp32", "--dump", path]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"hf_roundtrip: {' '.join(cmd)} failed ({done.returncode}):\n{done.stdout}{done.stderr}")
    return load_file(path)


def hf_outputs(model, dump):
    """HF's logits at joule's masked positions (row by row, a row's first 0 ends it) and its two losses."""
    with torch.no_grad():
        out = model(input_ids=dump["input_ids"], token_type_ids=dump["token_type_ids"],
                    attention_mask=dump["attention_mask"])
    positions = dump["masked_positions"]
    valid = (positions != 0).long().cumprod(1).bool()
    rows = torch.arange(positions.size(0)).unsqueeze(1).expand_as(positions)[valid]
    mlm_logits = out.prediction_logits[rows, positions[valid]]
    labels = dump["masked_ids"][valid]
    return {
        "mlm_logits": mlm_logits,
        "nsp_logits": out.seq_relationship_logits,
        "mlm_loss": F.cross_entropy(mlm_logits, labels),
        "nsp_loss": F.cross_entropy(out.seq_relationship_logits, dump["next_sentence_labels"]),
    }


def hf_loss_with_labels(model, dump):
    """HF's own `loss` (labels -100 off the masked positions): the sum of the two losses joule reports."""
    positions = dump["masked_positions"]
    valid = (positions != 0).long().cumprod(1).bool()
    labels = torch.full_like(dump["input_ids"], -100)
    rows = torch.arange(positions.size(0)).unsqueeze(1).expand_as(positions)[valid]
    labels[rows, positions[valid]] = dump["masked_ids"][valid]
    with torch.no_grad():
        out = model(input_ids=dump["input_ids"], token_type_ids=dump["token_type_ids"], attention_mask=dump["attention_mask"],
                    labels=labels, next_sentence_label=dump["next_sentence_labels"])
    return float(out.loss)


def compare(joule, hf, tolerance):
    figures = {}
    for name in ("mlm_logits", "nsp_logits", "mlm_loss", "nsp_loss"):
        a, b = joule[name].reshape(-1).double(), hf[name].reshape(-1).double()
        if a.shape != b.shape:
            figures[name] = {"max_abs_diff": None, "shapes": [list(joule[name].shape), list(hf[name].shape)], "ok": False}
            continue
        diff = float((a - b).abs().max())
        figures[name] = {"max_abs_diff": diff, "ok": diff <= tolerance}
    return figures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--joule", required=True)
    ap.add_argument("--model", required=True, help="a joule model directory (RUN/final, or joule export's)")
    ap.add_argument("--data", required=True, help="shards joule eval reads (their vocabulary must fit the model)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--tolerance", type=float, default=1e-4)
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(0)

    # 1. joule -> HF
    dump = joule_dump(a.joule, a.model, a.data, a.batch, os.path.join(a.out, "joule_batch.safetensors"))
    hf = BertForPreTraining.from_pretrained(a.model, torch_dtype=torch.float32).eval()
    joule_to_hf = compare(dump, hf_outputs(hf, dump), a.tolerance)
    hf_total = hf_loss_with_labels(hf, dump)
    joule_total = float(dump["mlm_loss"][0] + dump["nsp_loss"][0])
    joule_to_hf["hf_loss_with_labels"] = {"hf": hf_total, "joule": joule_total,
                                          "max_abs_diff": abs(hf_total - joule_total),
                                          "ok": abs(hf_total - joule_total) <= a.tolerance}

    # 2. HF -> joule: fresh weights of the same config, saved by HF
    config = BertConfig.from_pretrained(a.model)
    fresh = BertForPreTraining(config).eval()
    saved = os.path.join(a.out, "hf_saved")
    fresh.save_pretrained(saved, safe_serialization=True)
    dump2 = joule_dump(a.joule, saved, a.data, a.batch, os.path.join(a.out, "joule_on_hf.safetensors"))
    hf_to_joule = compare(dump2, hf_outputs(fresh, dump2), a.tolerance)

    result = {
        "transformers": __import__("transformers").__version__, "torch": torch.__version__,
        "model": a.model, "batch": a.batch, "masked_predictions": int(dump["mlm_logits"].shape[0]),
        "tolerance": a.tolerance,
        "joule_to_hf": joule_to_hf, "hf_to_joule": hf_to_joule,
        "hf_saved_files": sorted(os.listdir(saved)),
    }
    result["ok"] = all(f["ok"] for part in (joule_to_hf, hf_to_joule) for f in part.values())
    with open(os.path.join(a.out, "hf_roundtrip.json"), "w") as f:
        json.dump(result, f, indent=2)
    print(json.dumps(result, indent=2))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
