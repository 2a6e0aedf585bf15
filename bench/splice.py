"""Put a generated section into bench/RESULTS.md between its markers, leaving the rest.

    python bench/splice.py NAME SECTION.md RESULTS.md

The section goes between ``<!-- NAME -->`` and ``<!-- /NAME -->`` (replacing what was
there), or is appended at the end when the file has no such markers (or does not
exist). ``bash bench/run_all.sh`` renders each of its sections this way, so the
sections written by hand between them (runs of other scripts, named in their text)
survive a re-run.
"""

from __future__ import annotations

import os
import re
import sys


def splice(name: str, section_path: str, results: str) -> None:
    """``section_path``'s text between the ``name`` markers of ``results``."""
    with open(section_path) as f:
        body = f.read().rstrip("\n")
    block = f"<!-- {name} -->\n{body}\n<!-- /{name} -->"
    text = open(results).read() if os.path.exists(results) else "# seenstore benchmark results\n"
    pattern = re.compile(rf"<!-- {re.escape(name)} -->.*?<!-- /{re.escape(name)} -->", re.S)
    if pattern.search(text):
        text = pattern.sub(lambda m: block, text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    with open(results, "w") as f:
        f.write(text)


if __name__ == "__main__":
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    splice(*sys.argv[1:])
