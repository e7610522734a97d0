#!/usr/bin/env python3
"""Check docs/ARCHITECTURE.md's table of CMake targets against CMake's own target graph.

Usage: python3 tools/check/architecture.py GRAPH_FILE docs/ARCHITECTURE.md

GRAPH_FILE is written at configure time by joule_write_target_graph (cmake/target_graph.cmake), one line a target:
NAME|TYPE|FOLDER|dep1,dep2,...|torch|hdf5. The doc's table lies between the lines <!-- targets: begin --> and
<!-- targets: end -->, with the header | target | folder | links (joule targets) | LibTorch | HDF5 |, one row a
target, bottom layer first. Both directions are compared (targets, folders, every link, LibTorch directly, HDF5
reached directly or through any chain of links), and every link must point to a target the table lists earlier (no
upward dependencies). Exit 0 when all match, 1 on differences, 2 when a
file cannot be read or parsed.
"""

import re
import sys

BEGIN = "<!-- targets: begin -->"
END = "<!-- targets: end -->"
HEADER = ["target", "folder", "links (joule targets)", "LibTorch", "HDF5"]
NONE = "\u2014"  # em dash: no links


class ParseError(Exception):
    pass


def read_graph(path):
    """{name: {"type", "folder", "links": set, "torch": bool, "hdf5": bool (directly)}} in file order."""
    graph = {}
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise ParseError(f"{path}: {e.strerror}")
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.startswith("#"):
            continue
        fields = line.split("|")
        if len(fields) != 6 or fields[4] not in ("yes", "no") or fields[5] not in ("yes", "no") or not fields[0]:
            raise ParseError(f"{path}:{number}: expected NAME|TYPE|FOLDER|deps|yes-or-no|yes-or-no, got {line!r}")
        name, kind, folder, deps, torch, hdf5 = fields
        if name in graph:
            raise ParseError(f"{path}:{number}: {name} listed twice")
        graph[name] = {"type": kind, "folder": folder,
                       "links": {d for d in deps.split(",") if d}, "torch": torch == "yes", "hdf5": hdf5 == "yes"}
    return graph


def reaches_hdf5(graph, name, seen=None):
    """Whether `name` links HDF5 itself or through any chain of joule links."""
    seen = set() if seen is None else seen
    if name in seen or name not in graph:
        return False
    seen.add(name)
    return graph[name]["hdf5"] or any(reaches_hdf5(graph, link, seen) for link in graph[name]["links"])


def cells(line):
    line = line.strip()
    if not (line.startswith("|") and line.endswith("|")):
        return None
    return [c.strip() for c in line[1:-1].split("|")]


def code(cell):
    """The text of a cell that is one backticked span, else None."""
    m = re.fullmatch(r"`([^`]+)`", cell)
    return m.group(1).strip() if m else None


def read_doc(path):
    """[(name, folder, links list, torch bool, line number, hdf5 bool)] in table order."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise ParseError(f"{path}: {e.strerror}")
    starts = [i for i, l in enumerate(lines) if l.strip() == BEGIN]
    ends = [i for i, l in enumerate(lines) if l.strip() == END]
    if len(starts) != 1 or len(ends) != 1 or ends[0] < starts[0]:
        raise ParseError(f"{path}: expected one {BEGIN} line followed by one {END} line")
    table = [(i + 1, l) for i, l in enumerate(lines[starts[0] + 1:ends[0]], starts[0] + 1) if l.strip()]
    if len(table) < 2 or cells(table[0][1]) != HEADER:
        raise ParseError(f"{path}: the table must start with the header | " + " | ".join(HEADER) + " |")
    separator = cells(table[1][1])
    if separator is None or len(separator) != len(HEADER) or not all(re.fullmatch(r":?-+:?", c) for c in separator):
        raise ParseError(f"{path}:{table[1][0]}: expected the table's separator row after its header")
    rows = []
    for number, line in table[2:]:
        row = cells(line)
        where = f"{path}:{number}"
        if row is None or len(row) != len(HEADER):
            raise ParseError(f"{where}: expected a row of {len(HEADER)} cells, got {line.strip()!r}")
        name, folder = code(row[0]), code(row[1])
        if name is None:
            raise ParseError(f"{where}: the target must be one name in backticks, got {row[0]!r}")
        if folder is None:
            raise ParseError(f"{where}: {name}'s folder must be one path in backticks, got {row[1]!r}")
        folder = folder.rstrip("/") or "."
        if row[2] == NONE:
            links = []
        else:
            links = [code(part.strip()) for part in row[2].split(",")]
            if not links or None in links:
                raise ParseError(f"{where}: {name}'s links must be backticked target names separated by commas, "
                                 f"or {NONE} for none, got {row[2]!r}")
        torch = row[3].lower()
        if torch not in ("yes", "no"):
            raise ParseError(f"{where}: {name}'s LibTorch must be yes or no, got {row[3]!r}")
        hdf5 = row[4].lower()
        if hdf5 not in ("yes", "no"):
            raise ParseError(f"{where}: {name}'s HDF5 must be yes or no, got {row[4]!r}")
        rows.append((name, folder, links, torch == "yes", number, hdf5 == "yes"))
    return rows


def compare(graph, rows):
    differences = []
    doc = {}
    for name, folder, links, torch, number, hdf5 in rows:
        if name in doc:
            differences.append(f"{name}: the doc lists it twice (lines {doc[name]['line']} and {number})")
            continue
        if len(set(links)) != len(links):
            differences.append(f"{name}: the doc lists a link twice")
        doc[name] = {"folder": folder, "links": set(links), "torch": torch, "line": number, "hdf5": hdf5}

    for name, target in graph.items():
        if name not in doc:
            differences.append(f"{name}: in CMake ({target['type']} in {target['folder']}), missing from the doc")
    for name in doc:
        if name not in graph:
            differences.append(f"{name}: in the doc (line {doc[name]['line']}), not a CMake target")

    for name, target in graph.items():
        if name not in doc:
            continue
        documented = doc[name]
        if target["folder"] != documented["folder"]:
            differences.append(f"{name}: CMake defines it in {target['folder']}, the doc says {documented['folder']}")
        for link in sorted(target["links"] - documented["links"]):
            differences.append(f"{name}: CMake links {link}, the doc does not")
        for link in sorted(documented["links"] - target["links"]):
            differences.append(f"{name}: the doc links {link}, CMake does not")
        if target["torch"] != documented["torch"]:
            said = "yes" if documented["torch"] else "no"
            real = "links LibTorch directly" if target["torch"] else "does not link LibTorch directly"
            differences.append(f"{name}: CMake {real}, the doc says LibTorch {said}")
        if reaches_hdf5(graph, name) != documented["hdf5"]:
            said = "yes" if documented["hdf5"] else "no"
            real = "reaches HDF5" if reaches_hdf5(graph, name) else "does not reach HDF5"
            differences.append(f"{name}: CMake {real} through its links, the doc says HDF5 {said}")

    # Layering: the table is ordered bottom layer first, so every link (CMake's and the doc's) of a row must point
    # to a row above it. Links to targets the table lacks are reported above as missing.
    position = {}
    for index, (name, *_) in enumerate(rows):
        position.setdefault(name, index)
    for index, (name, _, links, *_) in enumerate(rows):
        if position[name] != index:
            continue  # a repeated row, reported above
        every = set(links) | (graph[name]["links"] if name in graph else set())
        for link in sorted(every):
            if link == name:
                differences.append(f"{name} links itself")
            elif link in position and position[link] > index:
                differences.append(f"{name} links {link}, which the table lists after it "
                                   f"(line {rows[position[link]][4]} after line {rows[index][4]}: an upward dependency)")
    return differences


def main(argv):
    if len(argv) != 3:
        print("usage: python3 tools/check/architecture.py GRAPH_FILE docs/ARCHITECTURE.md", file=sys.stderr)
        return 2
    graph_path, doc_path = argv[1], argv[2]
    try:
        graph = read_graph(graph_path)
        rows = read_doc(doc_path)
    except ParseError as e:
        print(f"architecture: {e}", file=sys.stderr)
        return 2
    differences = compare(graph, rows)
    for line in differences:
        print(line)
    if differences:
        print(f"architecture: {len(differences)} difference(s) between {graph_path} and {doc_path}", file=sys.stderr)
        return 1
    print(f"architecture: {len(graph)} targets match {doc_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
