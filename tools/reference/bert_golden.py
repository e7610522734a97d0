#!/usr/bin/python3
"""Golden fixture for joule's BertForPreTraining, from an independent PyTorch-Python implementation.

Written from HuggingFace's BertForPreTraining semantics (post-LayerNorm encoder, exact erf GELU, tanh
pooler, MLM head with the decoder tied to the word embeddings plus its own bias, NSP head) with plain
torch functional calls; it shares no code with joule. It writes, into tests/fixtures/golden/:
  config.json        a bert-tiny-shaped config with a small vocabulary (keeps the fixture small), dropout 0
  model.safetensors  the weights (HF names; biases and LayerNorm perturbed so every parameter matters)
  batch.json         one batch in NVIDIA's layout (padding and unused prediction slots included)
  expected.json      mlm_loss, nsp_loss, loss and every parameter's gradient norm
  packed_batch.json  the same four sequences packed two a row into rows of 64 (the packed-shard layout: lengths,
                     predictions per sequence, one NSP label a sequence, positions offset into the row)
  packed_expected.json  the losses and gradients of the packed rows (forward's packed_layout: a block-diagonal
                     attention mask, positions restarting at each sequence, NSP at each [CLS]); checked here to equal
                     both the padded batch's and each sequence's alone (unpadded), so joule's packed rows must too

Regenerate (Debian's python3-torch):  /usr/bin/python3 tools/reference/bert_golden.py
"""
import json
import math
import os
import struct
import sys

import torch
import torch.nn.functional as F

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures", "golden")

CONFIG = {
    "architectures": ["BertForPreTraining"], "model_type": "bert",
    "vocab_size": 512, "hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2,
    "intermediate_size": 512, "max_position_embeddings": 64, "type_vocab_size": 2,
    "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0, "layer_norm_eps": 1e-12,
    "initializer_range": 0.02, "hidden_act": "gelu",
}


def make_weights(cfg, gen):
    h, i, v = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    w = {}

    def normal(*shape, std=0.02):
        return torch.randn(*shape, generator=gen) * std

    def linear(name, n_in, n_out):
        w[name + ".weight"] = normal(n_out, n_in)
        w[name + ".bias"] = normal(n_out)

    def layer_norm(name):
        w[name + ".weight"] = 1.0 + normal(h, std=0.1)
        w[name + ".bias"] = normal(h, std=0.1)

    w["bert.embeddings.word_embeddings.weight"] = normal(v, h)
    w["bert.embeddings.position_embeddings.weight"] = normal(cfg["max_position_embeddings"], h)
    w["bert.embeddings.token_type_embeddings.weight"] = normal(cfg["type_vocab_size"], h)
    layer_norm("bert.embeddings.LayerNorm")
    for n in range(cfg["num_hidden_layers"]):
        p = f"bert.encoder.layer.{n}."
        for part in ("query", "key", "value"):
            linear(p + "attention.self." + part, h, h)
        linear(p + "attention.output.dense", h, h)
        layer_norm(p + "attention.output.LayerNorm")
        linear(p + "intermediate.dense", h, i)
        linear(p + "output.dense", i, h)
        layer_norm(p + "output.LayerNorm")
    linear("bert.pooler.dense", h, h)
    linear("cls.predictions.transform.dense", h, h)
    layer_norm("cls.predictions.transform.LayerNorm")
    w["cls.predictions.bias"] = normal(v)
    linear("cls.seq_relationship", h, 2)
    return w


def make_batch(cfg, gen):
    b, length, preds = 4, 32, 6
    v = cfg["vocab_size"]
    ids = torch.randint(5, v, (b, length), generator=gen)
    ids[:, 0] = 2  # [CLS]
    mask = torch.ones(b, length, dtype=torch.long)
    types = torch.zeros(b, length, dtype=torch.long)
    real_lengths = [32, 27, 20, 32]
    for r, n in enumerate(real_lengths):
        mask[r, n:] = 0
        ids[r, n:] = 0  # [PAD]
        types[r, n // 2:n] = 1
    used = [6, 4, 6, 2]  # rows 1 and 3 leave prediction slots unused (position 0)
    positions = torch.zeros(b, preds, dtype=torch.long)
    labels = torch.zeros(b, preds, dtype=torch.long)
    for r in range(b):
        chosen = torch.randperm(real_lengths[r] - 1, generator=gen)[:used[r]] + 1
        positions[r, :used[r]] = chosen.sort().values
        labels[r, :used[r]] = torch.randint(5, v, (used[r],), generator=gen)
    nsp = torch.tensor([0, 1, 1, 0])
    return dict(input_ids=ids, token_type_ids=types, attention_mask=mask,
                masked_positions=positions, masked_ids=labels, next_sentence_labels=nsp)


def packed_layout(packed):
    """Packed rows on their own terms: each token attends to its own sequence only (padding: a sequence of its own),
    positions restart at each sequence, the pooler reads each sequence's [CLS], one NSP label a sequence."""
    b, length = packed["input_ids"].shape
    seq_of = torch.full((b, length), -1, dtype=torch.long)
    position = torch.zeros(b, length, dtype=torch.long)
    cls = []
    for r in range(b):
        at = 0
        for j, n in enumerate(packed["sequence_lengths"][r].tolist()):
            if n == 0:
                continue
            seq_of[r, at:at + n] = j
            position[r, at:at + n] = torch.arange(n)
            cls.append((r, at))
            at += n
    same = seq_of[:, :, None] == seq_of[:, None, :]
    ext = (~same).float()[:, None] * torch.finfo(torch.float32).min
    return position, ext, cls, packed["next_sentence_labels"][packed["sequence_lengths"] > 0]


def forward(cfg, w, batch):
    """Padded rows (one sequence each), or packed rows where the batch has sequence_lengths. MLM averaged over every
    prediction, NSP over every sequence."""
    h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    dh = h // heads
    eps = cfg["layer_norm_eps"]
    ids, types, mask = batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]
    b, length = ids.shape

    def ln(x, name):
        return F.layer_norm(x, (h,), w[name + ".weight"], w[name + ".bias"], eps)

    def lin(x, name):
        return F.linear(x, w[name + ".weight"], w[name + ".bias"])

    if "sequence_lengths" in batch:
        position, ext, cls, nsp_labels = packed_layout(batch)
        positions = F.embedding(position, w["bert.embeddings.position_embeddings.weight"])
    else:
        positions = w["bert.embeddings.position_embeddings.weight"][:length].unsqueeze(0)
        ext = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        cls, nsp_labels = [(r, 0) for r in range(b)], batch["next_sentence_labels"]
    x = (F.embedding(ids, w["bert.embeddings.word_embeddings.weight"], padding_idx=0) + positions
         + F.embedding(types, w["bert.embeddings.token_type_embeddings.weight"]))
    x = ln(x, "bert.embeddings.LayerNorm")
    for n in range(cfg["num_hidden_layers"]):
        p = f"bert.encoder.layer.{n}."

        def split(t):
            return t.view(b, length, heads, dh).permute(0, 2, 1, 3)

        q = split(lin(x, p + "attention.self.query"))
        k = split(lin(x, p + "attention.self.key"))
        v = split(lin(x, p + "attention.self.value"))
        scores = q @ k.transpose(-1, -2) / math.sqrt(dh) + ext
        ctx = (scores.softmax(-1) @ v).permute(0, 2, 1, 3).reshape(b, length, h)
        x = ln(lin(ctx, p + "attention.output.dense") + x, p + "attention.output.LayerNorm")
        inner = F.gelu(lin(x, p + "intermediate.dense"))
        x = ln(lin(inner, p + "output.dense") + x, p + "output.LayerNorm")
    first = torch.stack([x[r, at] for r, at in cls])
    pooled = torch.tanh(lin(first, "bert.pooler.dense"))
    nsp_logits = lin(pooled, "cls.seq_relationship")
    # Full-sequence MLM head with labels -100 everywhere but the masked positions (HF's convention).
    t = ln(F.gelu(lin(x, "cls.predictions.transform.dense")), "cls.predictions.transform.LayerNorm")
    logits = t @ w["bert.embeddings.word_embeddings.weight"].t() + w["cls.predictions.bias"]
    labels = torch.full((b, length), -100, dtype=torch.long)
    for r in range(b):
        for s in range(batch["masked_positions"].shape[1]):
            pos = int(batch["masked_positions"][r, s])
            if pos == 0:
                break
            labels[r, pos] = batch["masked_ids"][r, s]
    mlm = F.cross_entropy(logits.view(-1, logits.shape[-1]), labels.view(-1), ignore_index=-100)
    nsp = F.cross_entropy(nsp_logits, nsp_labels)
    return mlm, nsp


PACK_ROWS = [[0, 3], [2, 1]]  # which sequences of the golden batch share a row: 32 + 32, 20 + 27 tokens
PACK_LEN = 64


def make_packed_batch(batch):
    """The golden batch's sequences packed PACK_ROWS, in the packed-shard layout."""
    k, preds = 2, 2 * batch["masked_positions"].shape[1]
    rows = len(PACK_ROWS)
    out = {name: torch.zeros(rows, PACK_LEN, dtype=torch.long)
           for name in ("input_ids", "token_type_ids", "attention_mask")}
    out["masked_positions"] = torch.zeros(rows, preds, dtype=torch.long)
    out["masked_ids"] = torch.zeros(rows, preds, dtype=torch.long)
    out["next_sentence_labels"] = torch.zeros(rows, k, dtype=torch.long)
    out["sequence_lengths"] = torch.zeros(rows, k, dtype=torch.long)
    for r, members in enumerate(PACK_ROWS):
        at = slot = 0
        for j, s in enumerate(members):
            n = int(batch["attention_mask"][s].sum())
            for name in ("input_ids", "token_type_ids", "attention_mask"):
                out[name][r, at:at + n] = batch[name][s, :n]
            used = [int(p) for p in batch["masked_positions"][s] if p != 0]
            for i, pos in enumerate(used):
                out["masked_positions"][r, slot + i] = at + pos
                out["masked_ids"][r, slot + i] = batch["masked_ids"][s, i]
            out["next_sentence_labels"][r, j] = batch["next_sentence_labels"][s]
            out["sequence_lengths"][r, j] = n
            at, slot = at + n, slot + len(used)
    return out


def unpadded_loss(cfg, w, batch):
    """Each sequence alone at its own length, the losses weighted as one batch's: the definition packing must meet."""
    total_preds = int((batch["masked_positions"] != 0).sum())
    sequences = batch["input_ids"].shape[0]
    mlm_total, nsp_total = 0.0, 0.0
    for s in range(sequences):
        n = int(batch["attention_mask"][s].sum())
        one = {name: t[s:s + 1, :n] if t.dim() == 2 and t.shape[1] == batch["input_ids"].shape[1] else t[s:s + 1]
               for name, t in batch.items()}
        mlm, nsp = forward(cfg, w, one)
        mlm_total = mlm_total + mlm * int((one["masked_positions"] != 0).sum()) / total_preds
        nsp_total = nsp_total + nsp / sequences
    return mlm_total, nsp_total


def grad_slice(grad):
    flat = grad.detach().flatten()
    n = flat.numel()
    offsets = list(range(n)) if n <= 24 else list(range(8)) + list(range(n // 2 - 4, n // 2 + 4)) + list(range(n - 8, n))
    return {"offsets": offsets, "values": [flat[i].item() for i in offsets]}


def write_safetensors(path, tensors):
    header, offset, blobs = {"__metadata__": {"format": "pt"}}, 0, []
    for name, t in tensors.items():
        data = t.detach().contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)


def write_figures(batch_file, batch, expected_file, generator, mlm, nsp, params):
    with open(os.path.join(OUT, batch_file), "w") as f:
        json.dump({k: t.tolist() for k, t in batch.items()}, f)
        f.write("\n")
    expected = {
        "generator": generator,
        "mlm_loss": mlm.item(), "nsp_loss": nsp.item(), "loss": (mlm + nsp).item(),
        "grad_norms": {k: p.grad.norm().item() for k, p in params.items()},
        # Values, not only norms: for every tensor, the flattened gradient at the offsets listed (its first,
        # middle and last 8 elements; every element of a tensor of 24 or fewer).
        "grad_slices": {k: grad_slice(p.grad) for k, p in params.items()},
    }
    with open(os.path.join(OUT, expected_file), "w") as f:
        json.dump(expected, f, indent=1)
        f.write("\n")


def main():
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(20261129)
    w = make_weights(CONFIG, gen)
    batch = make_batch(CONFIG, gen)
    params = {k: t.clone().requires_grad_(True) for k, t in w.items()}
    mlm, nsp = forward(CONFIG, params, batch)
    (mlm + nsp).backward()
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "config.json"), "w") as f:
        json.dump(CONFIG, f, indent=2)
        f.write("\n")
    write_safetensors(os.path.join(OUT, "model.safetensors"), w)
    generator = "tools/reference/bert_golden.py, torch " + torch.__version__
    write_figures("batch.json", batch, "expected.json", generator, mlm, nsp, params)

    # Packed rows, held to the padded figures and to each sequence's alone before they are written.
    packed = make_packed_batch(batch)
    packed_params = {k: t.clone().requires_grad_(True) for k, t in w.items()}
    pmlm, pnsp = forward(CONFIG, packed_params, packed)
    (pmlm + pnsp).backward()
    with torch.no_grad():
        umlm, unsp = unpadded_loss(CONFIG, w, batch)
    for what, got, want in (("mlm", pmlm, mlm), ("nsp", pnsp, nsp), ("mlm unpadded", umlm, mlm),
                            ("nsp unpadded", unsp, nsp)):
        assert abs(float(got) - float(want)) <= 1e-5 * abs(float(want)), (what, float(got), float(want))
    for k, p in packed_params.items():
        ref = params[k].grad
        assert (p.grad - ref).abs().max() <= 1e-4 * max(ref.norm() / math.sqrt(ref.numel()), 1e-6), k
    write_figures("packed_batch.json", packed, "packed_expected.json", generator + ", packed rows", pmlm, pnsp,
                  packed_params)
    print(f"mlm {mlm.item():.6f} nsp {nsp.item():.6f} -> {os.path.normpath(OUT)}", file=sys.stderr)


if __name__ == "__main__":
    main()
