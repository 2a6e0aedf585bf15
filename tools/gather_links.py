"""Gather real ``base<TAB>href`` link lines from the HTML and text files on this disk.

The benchmark of ``seenstore add --pairs`` needs real links, and the machines it
runs on have no internet. The documentation installed on them is real HTML written
by people and tools: the Rust toolchain's docs (~110k pages under ~/.rustup), Python
packages' docs (site-packages), /usr/share/doc, node's and npm's docs. This script
extracts, with the standard library's html.parser, every link of every page in
page order (``a[href]``, ``link[href]``, ``img[src]``, ``script[src]``,
``iframe[src]``, ``area[href]``, ``form[action]``), written exactly as the page has
it (entities decoded, as a crawler would see it), and every ``http(s)://`` URL found
in plain-text files (READMEs, package METADATA, man pages, ...).

The base of a page is its public address when the doc set has one (Rust:
``https://doc.rust-lang.org/<toolchain>/...``, Python: ``https://docs.python.org/3/``),
else ``https://<doc-set>.docs.invalid/<path>`` (a real relative link resolved against
a synthetic host: the normaliser treats it like any other host). Pages are visited in
a seeded shuffled order until --lines lines; with --repeat, the gathered lines are
repeated (each copy re-shuffled by page) to reach --lines, and the script says so.

    python tools/gather_links.py --out scratch/links.tsv --lines 3000000 [--seed 1]
"""

from __future__ import annotations

import argparse
import html.parser
import os
import random
import re
import sys

ROOTS = ["/root/.rustup/toolchains", "/usr/share/doc", "/usr/lib/node_modules",
         "/usr/lib/google-cloud-sdk", "/usr/share/gtk-doc", "/usr/share/gettext",
         sys.prefix, "/usr/share/man", "/usr/share/common-licenses"]
LINK_ATTRS = {"a": "href", "link": "href", "area": "href", "img": "src", "script": "src",
              "iframe": "src", "form": "action", "source": "src"}
TEXT_URL = re.compile(rb"https?://[^\s<>\"'`)\]}]+")
TEXT_SUFFIXES = (".txt", ".md", ".rst", "METADATA", "README", "copyright", ".1", ".5", ".8")


class _Links(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.links: list[str] = []

    def handle_starttag(self, tag, attrs):
        want = LINK_ATTRS.get(tag)
        if want is None:
            return
        for k, v in attrs:
            if k == want and v is not None:
                self.links.append(v)


def page_base(path: str) -> str:
    """The public address of a page (or a synthetic https one), see the module doc."""
    m = re.search(r"/toolchains/(stable|nightly|beta)[^/]*/share/doc/rust/html/(.*)", path)
    if m:
        return f"https://doc.rust-lang.org/{m.group(1)}/{m.group(2)}"
    parts = [p for p in path.split("/") if p]
    for anchor in ("doc", "node_modules", "site-packages", "platform", "man"):
        if anchor in parts:
            i = parts.index(anchor)
            if i + 1 < len(parts):
                host = re.sub(r"[^a-z0-9-]", "-", parts[i + 1].lower()).strip("-") or "root"
                return f"https://{host}.docs.invalid/" + "/".join(parts[i + 2:])
    return "https://local.docs.invalid/" + "/".join(parts)


def files() -> list[str]:
    out = []
    for root in ROOTS:
        for d, _, names in os.walk(root):
            for n in names:
                if n.endswith((".html", ".htm")) or n.endswith(TEXT_SUFFIXES):
                    out.append(os.path.join(d, n))
    return sorted(set(out))


def _clean(s: str) -> str:
    return s.replace("\t", " ").replace("\r", " ").replace("\n", " ")


def links_of(path: str) -> list[str]:
    """``base<TAB>href`` lines of one file (hrefs with a TAB/CR/LF get a space)."""
    try:
        with open(path, "rb") as f:
            raw = f.read(8 << 20)
    except OSError:
        return []
    base = page_base(path)
    if path.endswith((".html", ".htm")):
        p = _Links()
        try:
            p.feed(raw.decode("utf-8", "replace"))
            p.close()
        except Exception:  # noqa: BLE001 - a broken page gives what it gave
            pass
        hrefs = p.links
    else:
        hrefs = [m.decode("utf-8", "replace") for m in TEXT_URL.findall(raw)]
    return [f"{base}\t{_clean(h)}" for h in hrefs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--lines", type=int, default=3_000_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--repeat", action="store_true",
                    help="repeat the real lines (page order re-shuffled) to reach --lines")
    a = ap.parse_args()
    r = random.Random(a.seed)
    paths = files()
    r.shuffle(paths)
    pages: list[list[str]] = []
    n = used = 0
    for path in paths:
        ls = links_of(path)
        used += 1
        if ls:
            pages.append(ls)
            n += len(ls)
        if n >= a.lines:
            break
    distinct = n
    print(f"{used} of {len(paths)} files read, {len(pages)} with links, {distinct} lines",
          file=sys.stderr)
    with open(a.out, "w", encoding="utf-8", errors="surrogateescape", newline="\n") as f:
        written = 0
        while written < a.lines and pages:
            for ls in pages:
                f.write("\n".join(ls[: a.lines - written]) + "\n")
                written += min(len(ls), a.lines - written)
                if written >= a.lines:
                    break
            if not a.repeat:
                break
            r.shuffle(pages)
    print(f"wrote {written} lines to {a.out}"
          + (f" ({distinct} gathered, repeated)" if written > distinct else ""), file=sys.stderr)


if __name__ == "__main__":
    main()
