"""Counts and sizes as the benchmarks read and print them.

``parse_count`` reads a whole number written the way people write key counts (1e9,
2.5e6, 1_000_000) and refuses anything else with InvalidInputError; ``gib`` and
``mib`` print byte counts. Shared by ``seenstore bench``, the CLI's count options and
the scripts under bench/.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation

from seenstore.errors import InvalidInputError


def parse_count(text: str) -> int:
    """A whole non-negative number written as 1e9, 2.5e6, 1_000_000 or 1000000.

    Raises InvalidInputError for anything else (1.5, -3, 1e-3, abc)."""
    try:
        d = Decimal(str(text).replace("_", ""))
    except InvalidOperation:
        raise InvalidInputError(f"{text!r} is not a number (write e.g. 1e9 or 1000000)") from None
    if not d.is_finite() or d != d.to_integral_value() or d < 0:
        raise InvalidInputError(f"{text!r} is not a whole non-negative number")
    return int(d)


def gib(n: float) -> str:
    """``n`` bytes in GiB, one decimal: "1.5 GiB"."""
    return f"{n / 2**30:.1f} GiB"


def mib(n: float) -> str:
    """``n`` bytes in whole MiB with thousands separators: "1,024 MiB"."""
    return f"{n / 2**20:,.0f} MiB"
