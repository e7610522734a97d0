#!/usr/bin/env python3
"""Real English text for the demo: the prose of the Python 3.11 documentation (Debian's python3.11-doc, the Sphinx
sources under html/_sources/; the PSF License Agreement for the documentation, code examples under Zero-Clause BSD)
as a `joule data create` corpus: one sentence per line, a blank line between documents (one document per source file).

What is kept: the paragraphs of running text, their inline markup reduced to its words (:func:`~os.path.join` -> join,
``x`` -> x, `text <url>`_ -> text). What is dropped: code (literal blocks after "::", doctest lines, indented blocks),
directives and their bodies (.. code-block::, .. note::, .. versionadded::), tables, section underlines, comments, and
sentences of fewer than 4 words, not starting with a capital (a list's fragment) or with fewer letters than other
characters. Documents with fewer than 2 sentences are
left out. Standard library only; deterministic (sources in sorted order).

usage: real_text_corpus.py SOURCES_DIR OUT.txt
"""
import os
import re
import sys

ROLE = re.compile(r":[a-zA-Z0-9_:+.-]+:`(?:~|!)?([^`<]*?)(?:\s*<[^`>]*>)?`")
LINK = re.compile(r"`([^`<]+?)\s*<[^`>]*>`__?")
LITERAL = re.compile(r"``([^`]+)``")
INTERPRETED = re.compile(r"`([^`]+)`_{0,2}")
EMPHASIS = re.compile(r"\*{1,2}([^*\s][^*]*?)\*{1,2}")
FOOTNOTE = re.compile(r"\s*\[(?:#|\*|\d+|[A-Za-z][\w-]*)\]_")
SUBSTITUTION = re.compile(r"\|([^|\s][^|]*)\|")
UNDERLINE = re.compile(r"^([=\-~^\"'`#*+.:_])\1{2,}\s*$")
TABLE = re.compile(r"^\s*(\+[-=+]+\+|=+(\s+=+)+)\s*$")
BULLET = re.compile(r"^(\s*)([-*+]|\d+\.|#\.|\(\d+\)|[a-z]\))\s+")
SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]?\s+(?=[A-Z\"'(])")
ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "cf.", "Mr.", "Dr.", "No.", "approx.")


def inline(text):
    """Inline reST markup reduced to its words: a role's target written with '~' keeps its last part."""
    def role(m):
        words = m.group(1).strip()
        whole = m.group(0)
        if "~" in whole.split("`")[1][:1] and "." in words:
            words = words.rsplit(".", 1)[1]
        return words
    text = ROLE.sub(role, text)
    text = LINK.sub(r"\1", text)
    text = LITERAL.sub(r"\1", text)
    text = INTERPRETED.sub(r"\1", text)
    text = EMPHASIS.sub(r"\1", text)
    text = FOOTNOTE.sub("", text)
    text = SUBSTITUTION.sub(r"\1", text)
    text = text.replace("\\ ", "").replace("\\", "")
    return re.sub(r"\s+", " ", text).strip()


def paragraphs(lines):
    """The running-text paragraphs of one reST file, in order."""
    out, current = [], []
    skip_indent = None  # inside a directive's body or a literal block: lines indented deeper than this are skipped
    literal_next = False
    last_indent = 0

    def flush():
        if current:
            out.append(" ".join(current))
            current.clear()

    for raw in lines:
        line = raw.rstrip("\n").expandtabs(8)
        stripped = line.strip()
        indent = len(line) - len(line.lstrip(" "))
        if skip_indent is not None:
            if not stripped or indent > skip_indent:
                continue
            skip_indent = None
        if not stripped:
            flush()
            if literal_next:  # the block after a paragraph ending in "::" is code
                skip_indent = last_indent
                literal_next = False
            continue
        if stripped.startswith(".. ") or stripped == "..":
            flush()
            skip_indent = indent
            continue
        if UNDERLINE.match(stripped) or TABLE.match(line) or stripped.startswith(("|", ">>>", "...", "$ ", "%")):
            if UNDERLINE.match(stripped) and current:  # a section title: not a sentence
                current.pop()
            flush()
            continue
        bullet = BULLET.match(line)
        if bullet:
            flush()
            line = line[bullet.end():]
            stripped = line.strip()
        elif current and indent != last_indent:
            flush()
        current.append(stripped)
        last_indent = indent
        if stripped.endswith("::"):
            current[-1] = stripped[:-2].rstrip() + ("" if stripped == "::" else ":")
            flush()
            literal_next = True
    flush()
    return out


def sentences(paragraph):
    text = inline(paragraph)
    for a in ABBREVIATIONS:
        text = text.replace(a, a.replace(".", "\0"))
    for s in SENTENCE_END.split(text):
        s = s.replace("\0", ".").strip()
        letters = sum(c.isalpha() for c in s)
        if len(s.split()) >= 4 and letters > len(s) - letters and s[:1].isupper() and s[-1:] in ".!?:\"')":
            yield s


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().splitlines()[-1])
    root, out_path = sys.argv[1], sys.argv[2]
    files = sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs if f.endswith((".rst.txt", ".rst")))
    if not files:
        sys.exit(f"{root}: no .rst.txt or .rst files (the Sphinx sources, html/_sources/)")
    documents = sentences_total = 0
    with open(out_path + ".partial", "w", encoding="utf-8") as out:
        for path in files:
            with open(path, encoding="utf-8", errors="replace") as f:
                doc = [s for p in paragraphs(f) for s in sentences(p)]
            if len(doc) < 2:
                continue
            out.write("\n".join(doc) + "\n\n")
            documents += 1
            sentences_total += len(doc)
    os.replace(out_path + ".partial", out_path)
    print(f"{out_path}: {documents} documents, {sentences_total} sentences from {len(files)} files under {root}")


if __name__ == "__main__":
    main()
