#!/usr/bin/env python3
"""Expected fingerprint collisions (URLs lost) per host size for a host-bits setting H.

A key is host_hash[top H bits] | url_hash[low 64-H bits], so all URLs of one host
draw from 2**(64-H) values; a collision makes the store treat a new URL as seen.
Usage: python tools/collisions.py [--host-bits H ...] [--sizes 1e3,1e4,...]
Formula and discussion: docs/fingerprint.md (seenstore.url.fingerprint.expected_collisions).
"""

from __future__ import annotations

import argparse

from seenstore.url.fingerprint import expected_collisions
from seenstore.layout import DEFAULT_LAYOUT

DEFAULT_SIZES = "1e3,1e4,1e5,1e6,1e7,1e8,1e9"


def table(host_bits: list[int], sizes: list[float]) -> str:
    head = "| URLs on one host | " + " | ".join(f"H={h} (url bits {64 - h})" for h in host_bits)
    rows = [head + " |", "|---:|" + "---:|" * len(host_bits)]
    for n in sizes:
        cells = []
        for h in host_bits:
            e = expected_collisions(n, 64 - h)
            cells.append(f"{e:.3g} ({e / n:.1e} of URLs)" if e else "0")
        rows.append(f"| {n:.0e} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--host-bits", type=int, nargs="+", default=[DEFAULT_LAYOUT.host_bits],
                    metavar="H", help="one or more H values (default: the default layout)")
    ap.add_argument("--sizes", default=DEFAULT_SIZES,
                    help=f"comma-separated URL counts per host (default {DEFAULT_SIZES})")
    a = ap.parse_args()
    if any(not 0 <= h <= 32 for h in a.host_bits):
        ap.error("H must be in 0..32")
    try:
        sizes = [float(s) for s in a.sizes.split(",")]
    except ValueError:
        ap.error("--sizes must be numbers such as 1e6,2.5e7")
    print(table(a.host_bits, sizes))


if __name__ == "__main__":
    main()
