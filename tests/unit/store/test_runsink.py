"""The run sink (seenstore/runsink.py): new keys written on a thread behind the check."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from seenstore.store.runsink import RunSink


class Recorder:
    def __init__(self, fail_at=None):
        self.written, self.order, self.fail_at = {}, [], fail_at

    def open(self, shard):
        self.order.append(("open", shard))
        return []

    def write(self, shard, w, keys):
        if self.fail_at is not None and len(self.order) >= self.fail_at:
            raise OSError(28, "No space left on device")
        w.extend(int(k) for k in keys)  # copied now: the sink reuses its buffer
        self.order.append(("write", shard))

    def finished(self, shard, w):
        self.written[shard] = list(w)
        self.order.append(("finished", shard))


@settings(max_examples=40, deadline=None)
@given(shards=st.lists(st.lists(st.integers(0, 2**64 - 1), max_size=40), max_size=6),
       buf_keys=st.integers(1, 7), n_bufs=st.integers(1, 3))
def test_every_shard_gets_its_keys_in_order_whatever_the_buffers(shards, buf_keys, n_bufs):
    r = Recorder()
    sink = RunSink(r.open, r.write, r.finished, buf_keys, n_bufs)
    want = {}
    for s, keys in enumerate(shards):
        keys = np.array(sorted(keys), dtype=np.uint64)
        for piece in np.array_split(keys, 3):
            sink.put(s, piece)
            piece[:] = 0  # the caller reuses its array as soon as put returns
        sink.end(s)
        if len(keys):
            want[s] = [int(k) for k in sorted(shards[s])]
    sink.close()
    assert r.written == want
    finished = [s for what, s in r.order if what == "finished"]
    assert finished == sorted(finished)  # runs finished in shard order


def test_a_failed_write_is_raised_and_later_keys_are_dropped():
    r = Recorder(fail_at=3)
    sink = RunSink(r.open, r.write, r.finished, 2, 1)
    with pytest.raises(OSError, match="No space"):
        for s in range(50):
            sink.put(s, np.arange(10, dtype=np.uint64))
            sink.end(s)
        sink.close()
    sink.abort()
    assert not sink.thread.is_alive()
    assert len(r.written) <= 1


def test_abort_stops_without_raising():
    r = Recorder(fail_at=0)
    sink = RunSink(r.open, r.write, r.finished, 4, 2)
    sink.put(0, np.arange(3, dtype=np.uint64))
    sink.abort()
    assert not sink.thread.is_alive() and r.written == {}
