#!/usr/bin/python3
"""Golden cases for joule's BERT tokenizer, from a Python implementation of the semantics of Google's
reference tokenization.py (clean text, CJK split, lower-case + NFD accent strip, punctuation split,
greedy longest-match-first WordPiece, [UNK] past 200 characters) on Python's own unicodedata.

Writes tests/fixtures/tokenizer/{vocab.txt,expected.json}.
Regenerate:  /usr/bin/python3 tools/reference/tokenizer_golden.py
"""
import json
import os
import unicodedata

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "fixtures", "tokenizer")

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
         "the", "quick", "brown", "fox", "un", "##aff", "##able", "a", "##b", "##c", "b", "c",
         "hello", "world", "!", ",", ".", "?", "'", "-", "(", ")", "$", "^", "`", "\"", "¿", "«", "»",
         "cafe", "café", "naive", "naïve", "resume", "##s", "Hello", "World", "CAFÉ", "Straße", "strasse",
         "straße", "中", "国", "人", "日", "本", "語", "ひらがな", "한국어", "x", "##x", "##xx", "run", "##ning",
         "i", "ı", "İstanbul", "istanbul", "ﬁ", "fi", "##ﬁ", "—", "…", "٫", "١٢٣", "ß", "ǅ", "ǆ"]

CASES = [
    "the quick brown fox", "unaffable", "Hello, World!", "hello,world?!", "  leading and   trailing  ",
    "café naïve résumé", "CAFÉ Straße", "Ångström", "中国人 and 日本語", "mixed中文text",
    "tab\there\nnewline\rcarriage", "zero\u200bwidth", "soft\u00adhyphen", "ctrl\x07bell\x1fus",
    "nul\x00byte", "repl\ufffdchar", "nbsp\u00a0space", "ideographic\u3000space", "line\u2028sep",
    "para\u2029sep", "thin\u2009space", "em—dash…ellipsis", "(parens) $money ^caret `tick`", "\"quoted\"",
    "¿qué? «guillemets»", "x" * 200, "x" * 201, "xxxxx", "running runs", "abc", "bca", "unknownword",
    "İstanbul ISTANBUL", "ﬁnance ﬁ", "ǅemal ǆ", "١٢٣٫٤", "ひらがな 한국어", "", "   ", "a\u0301b",
    "e\u0308\u0301", "🙂 emoji", "don't", "well-known", "U.S.A.", "3.14", "#hashtag @mention",
]


def is_whitespace(ch):
    return ch in " \t\n\r" or unicodedata.category(ch) == "Zs"


def is_control(ch):
    if ch in "\t\n\r":
        return False
    return unicodedata.category(ch) in ("Cc", "Cf")


def is_punctuation(ch):
    cp = ord(ch)
    if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def is_cjk(cp):
    return any(lo <= cp <= hi for lo, hi in [(0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF),
                                             (0x2A700, 0x2B73F), (0x2B740, 0x2B81F), (0x2B820, 0x2CEAF),
                                             (0xF900, 0xFAFF), (0x2F800, 0x2FA1F)])


def basic(text, lower):
    out = []
    for ch in text:
        if ord(ch) == 0 or ord(ch) == 0xFFFD or is_control(ch):
            continue
        if is_whitespace(ch):
            out.append(" ")
        elif is_cjk(ord(ch)):
            out.extend([" ", ch, " "])
        else:
            out.append(ch)
    words = []
    for word in "".join(out).strip().split():
        if lower:
            word = "".join(c for c in unicodedata.normalize("NFD", word.lower()) if unicodedata.category(c) != "Mn")
        current = ""
        for ch in word:
            if is_punctuation(ch):
                if current:
                    words.append(current)
                current = ""
                words.append(ch)
            else:
                current += ch
        if current:
            words.append(current)
    return " ".join(words).strip().split()


def wordpiece(word, vocab):
    if len(word) > 200:
        return ["[UNK]"]
    pieces, start = [], 0
    while start < len(word):
        end, found = len(word), None
        while start < end:
            piece = ("##" if start else "") + word[start:end]
            if piece in vocab:
                found = piece
                break
            end -= 1
        if found is None:
            return ["[UNK]"]
        pieces.append(found)
        start = end
    return pieces


def main():
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "vocab.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(VOCAB) + "\n")
    vocab = set(VOCAB)
    expected = []
    for lower in (True, False):
        for text in CASES:
            tokens = [p for w in basic(text, lower) for p in wordpiece(w, vocab)]
            expected.append({"text": text, "lower_case": lower, "words": basic(text, lower), "tokens": tokens})
    with open(os.path.join(OUT, "expected.json"), "w", encoding="utf-8") as f:
        json.dump({"generator": "tools/reference/tokenizer_golden.py", "unicode": unicodedata.unidata_version,
                   "cases": expected}, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
