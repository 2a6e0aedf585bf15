"""The kept-URL gather (kernels/kept.py ``order_lines``) against its numpy twin and a
Python oracle (the lines split, reordered, joined): random lines (empty ones, long
ones past the 8-byte steps, bytes near ``\\n``) in random orders, and the counts it
returns for text that does not hold ``len(order)`` lines or lacks its last ``\\n``."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from seenstore.kernels import dispatch as D

line_st = st.one_of(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")),
                    st.sampled_from([b"", b"\t", b"\x0b", b"\x8a" * 9, b"x" * 70]))


def gather(which: str, text: bytes, order) -> tuple[int, bytes, list[int]]:
    fn = D.kept.kernel("order_lines") if which == "kernel" else D.kept.twin("order_lines")
    src = np.frombuffer(text, dtype=np.uint8)
    out = np.full(len(text) + 3, 0xEE, dtype=np.uint8)  # past len(text): never written
    ends = np.full(len(order) + 1, -7, dtype=np.int64)
    got = fn(src, np.asarray(order, dtype=np.int64), out, ends)
    assert out[len(text):].tolist() == [0xEE] * 3 and ends[len(order)] == -7
    return got, out[:len(text)].tobytes(), ends[:len(order)].tolist()


@settings(max_examples=200, deadline=None)
@given(lines=st.lists(line_st, max_size=60), data=st.data())
@example(lines=[], data=None)
@example(lines=[b""], data=None)
def test_order_lines_kernel_twin_and_oracle_agree(lines, data):
    order = list(range(len(lines)))
    if data is not None:
        order = data.draw(st.permutations(order))
    text = b"".join(u + b"\n" for u in lines)
    want = [lines[i] + b"\n" for i in order]
    for which in ("kernel", "twin"):
        got, out, ends = gather(which, text, order)
        assert got == len(lines), which
        assert out == b"".join(want), which
        assert ends == np.cumsum([len(w) for w in want]).tolist(), which


@settings(max_examples=100, deadline=None)
@given(lines=st.lists(line_st, min_size=1, max_size=20), extra=st.integers(-3, 3),
       tail=st.booleans())
def test_order_lines_reports_text_that_does_not_pair_up(lines, extra, tail):
    text = b"".join(u + b"\n" for u in lines) + (b"tail" if tail else b"")
    n = max(len(lines) + extra, 0)
    order = list(range(n))
    want = -1 if tail else len(lines)
    for which in ("kernel", "twin"):
        got, _, _ = gather(which, text, order)
        assert got == want, which


def test_order_lines_dispatches_to_either_with_the_same_result():
    lines = [f"http://h{i % 7}.test/{i}".encode() for i in range(500)]
    text = np.frombuffer(b"".join(u + b"\n" for u in lines), dtype=np.uint8)
    order = np.argsort([(i * 7919) % 1000 for i in range(len(lines))], kind="stable")
    outs = []
    for ctx in (D.twins_only, D.kernels_only):
        out, ends = np.empty(len(text), np.uint8), np.empty(len(lines), np.int64)
        with ctx():
            assert D.kept.order_lines(text, order, out, ends) == len(lines)
        outs.append((out.tobytes(), ends.tolist()))
    assert outs[0] == outs[1]
    assert outs[0][0].split(b"\n")[:-1] == [lines[i] for i in order]
