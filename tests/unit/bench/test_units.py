"""seenstore/bench/units.py: counts as people write them, and nothing else."""

import pytest

from seenstore.bench.units import gib, mib, parse_count
from seenstore.errors import InvalidInputError


@pytest.mark.parametrize("text,n", [("1e9", 10**9), ("2.5e6", 2_500_000), ("1_000_000", 10**6),
                                    ("1000000", 10**6), ("0", 0), (7, 7)])
def test_whole_numbers_are_read(text, n):
    assert parse_count(text) == n


@pytest.mark.parametrize("text", ["1.5", "-3", "1e-3", "abc", "", "inf", "nan"])
def test_anything_else_is_refused(text):
    with pytest.raises(InvalidInputError):
        parse_count(text)


def test_sizes_print_in_binary_units():
    assert gib(3 << 29) == "1.5 GiB" and mib(1 << 30) == "1,024 MiB"
