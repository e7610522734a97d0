#!/usr/bin/env python3
"""tools/real_text_corpus.py on a Sphinx source in the Python documentation's style: running text is kept as one
sentence a line with its inline markup reduced to words; the title, directives and their bodies, the literal block
after "::", doctest lines, a list's fragment and a table are dropped; documents are separated by a blank line.
usage: real_text_corpus_test.py TOOLS_DIR WORK_DIR
"""
import os
import shutil
import subprocess
import sys

SOURCE = """:mod:`os.path` --- Common pathname manipulations
================================================

.. module:: os.path
   :synopsis: Operations on pathnames.

This module implements some useful functions on pathnames. To read or write
files see :func:`open`, and for accessing the filesystem see the :mod:`os`
module.  The path parameters can be passed as strings, or bytes.

.. note::

   Since different operating systems have different path name conventions,
   there are several versions of this module in the standard library.

For example, :func:`~os.path.join` combines parts, e.g. a directory and a file::

   >>> os.path.join("a", "b")
   'a/b'

The result is a string.  See `the tutorial <https://docs.python.org/>`_ for **more** details.

* The first item of a list is kept as its own paragraph when it reads as a sentence.
* short one

+------+------+
| a    | b    |
+------+------+
"""
EXPECTED = """This module implements some useful functions on pathnames.
To read or write files see open, and for accessing the filesystem see the os module.
The path parameters can be passed as strings, or bytes.
For example, join combines parts, e.g. a directory and a file:
The result is a string.
See the tutorial for more details.
The first item of a list is kept as its own paragraph when it reads as a sentence.

This second file has two sentences of running text.
It ends the corpus.

"""

tools, work = sys.argv[1], sys.argv[2]
shutil.rmtree(work, ignore_errors=True)
os.makedirs(os.path.join(work, "sources", "library"))
with open(os.path.join(work, "sources", "library", "os.path.rst.txt"), "w") as f:
    f.write(SOURCE)
with open(os.path.join(work, "sources", "library", "zz.rst.txt"), "w") as f:
    f.write("Title\n=====\n\nThis second file has two sentences of running text.  It ends the corpus.\n")
with open(os.path.join(work, "sources", "one.rst.txt"), "w") as f:
    f.write("Only one sentence here, so the document is left out.\n")
out = os.path.join(work, "corpus.txt")
run = subprocess.run([sys.executable, os.path.join(tools, "real_text_corpus.py"), os.path.join(work, "sources"), out],
                     capture_output=True, text=True)
if run.returncode != 0:
    sys.exit(f"FAIL: real_text_corpus.py exited {run.returncode}:\n{run.stdout}{run.stderr}")
got = open(out, encoding="utf-8").read()
if got != EXPECTED:
    sys.exit(f"FAIL: the corpus differs from what was expected:\n{got}")
if "2 documents, 9 sentences from 3 files" not in run.stdout:
    sys.exit(f"FAIL: the summary line: {run.stdout}")
empty = subprocess.run([sys.executable, os.path.join(tools, "real_text_corpus.py"), work + "/missing", out],
                       capture_output=True, text=True)
if empty.returncode == 0 or "no .rst.txt or .rst files" not in empty.stderr:
    sys.exit(f"FAIL: a directory without sources: {empty.returncode} {empty.stderr}")
print("PASS real_text_corpus.py")
