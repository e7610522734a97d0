#!/usr/bin/python3
"""Padded pretraining shards (NVIDIA DeepLearningExamples' layout) whose sequence lengths follow Wikipedia's at 512:
tests/fixtures/packing/wikipedia_lengths_512.json, Krell et al.'s published histogram in bins of 16 tokens (uniform
within a bin). The tokens are random ids of bert-base's vocabulary with [CLS]/[SEP] where BERT puts them and 15 % of
each sequence's tokens masked (up to --max-pred): a workload for speed and packing, not text to learn from. A
vocab.txt of as many entries (the special tokens at bert-base-uncased's ids) goes beside the shards.
Debian's python3-h5py and python3-numpy.

    /usr/bin/python3 tools/bench/wikipedia_shards.py --out DIR [--sequences N] [--shards S] [--seed X]
"""
import argparse
import json
import os

import h5py
import numpy as np

CLS, SEP, MASK, FIRST_WORD, VOCAB = 101, 102, 103, 1000, 30522  # bert-base-uncased's ids
SEQ_LEN = 512


def lengths(rng, n):
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "../../tests/fixtures/packing/wikipedia_lengths_512.json")) as f:
        hist = json.load(f)
    weights = np.array(hist["thousands"] + [hist["thousands_at_512"]], dtype=float)
    width, bins = hist["bin_width"], len(hist["thousands"])
    b = rng.choice(len(weights), size=n, p=weights / weights.sum())
    short = np.minimum(b, bins - 1)
    low = np.maximum(width * short + 1, 5)  # [CLS] a [SEP] b [SEP] needs 5
    high = np.minimum(width * short + width, SEQ_LEN - 1)
    out = rng.integers(low, high + 1)
    out[b == bins] = SEQ_LEN
    return out


def shard(rng, lens, max_pred):
    n = len(lens)
    ids = np.zeros((n, SEQ_LEN), np.int32)
    mask = np.zeros((n, SEQ_LEN), np.int32)
    seg = np.zeros((n, SEQ_LEN), np.int32)
    pos = np.zeros((n, max_pred), np.int32)
    mids = np.zeros((n, max_pred), np.int32)
    nsp = rng.integers(0, 2, n).astype(np.int32)
    for r, length in enumerate(lens):
        words = length - 3
        a = int(rng.integers(1, words))  # segment A's words; B has the rest (at least one)
        row = np.concatenate([[CLS], rng.integers(FIRST_WORD, VOCAB, a), [SEP],
                              rng.integers(FIRST_WORD, VOCAB, words - a), [SEP]])
        ids[r, :length] = row
        mask[r, :length] = 1
        seg[r, a + 2:length] = 1
        candidates = [i for i in range(1, length) if row[i] != SEP]
        k = min(max_pred, max(1, round(0.15 * length)))
        chosen = np.sort(rng.choice(candidates, size=k, replace=False))
        pos[r, :k] = chosen
        mids[r, :k] = row[chosen]
        ids[r, chosen] = MASK
    return {"input_ids": ids, "input_mask": mask, "segment_ids": seg, "masked_lm_positions": pos,
            "masked_lm_ids": mids, "next_sentence_labels": nsp}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--sequences", type=int, default=20000)
    p.add_argument("--shards", type=int, default=2)
    p.add_argument("--max-pred", type=int, default=80)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    rng = np.random.default_rng(args.seed)
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "vocab.txt"), "w") as f:
        specials = {0: "[PAD]", 100: "[UNK]", CLS: "[CLS]", SEP: "[SEP]", MASK: "[MASK]"}
        f.writelines(specials.get(i, f"[unused{i}]" if i < FIRST_WORD else f"w{i}") + "\n" for i in range(VOCAB))
    all_lengths = lengths(rng, args.sequences)
    for s, part in enumerate(np.array_split(all_lengths, args.shards)):
        with h5py.File(os.path.join(args.out, f"part_{s:05d}.hdf5"), "w") as f:
            for name, data in shard(rng, part, args.max_pred).items():
                f.create_dataset(name, data=data, compression="gzip")
    print(f"{args.sequences} sequences in {args.shards} shards, {all_lengths.mean() / SEQ_LEN:.3f} of their tokens "
          f"real, in {args.out}")


if __name__ == "__main__":
    main()
