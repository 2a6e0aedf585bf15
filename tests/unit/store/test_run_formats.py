"""Run formats by default: a batch's runs raw, compacted runs of COMPRESS_MIN_KEYS keys or
more compressed (runs.live.format_for); run_format=1 / 2 force one format for every run."""

import numpy as np
import pytest

from seenstore.errors import InvalidInputError
from seenstore.store import SeenStore
from seenstore.store.runs import live as runsmod


def _formats(s) -> dict:
    return s.stats()["run_formats"]


def test_format_for():
    big, small = runsmod.COMPRESS_MIN_KEYS, runsmod.COMPRESS_MIN_KEYS - 1
    assert runsmod.DEFAULT_RUN_FORMAT is None
    assert runsmod.format_for(None, big, compacted=False) == 1  # a batch's run: raw
    assert runsmod.format_for(None, None, compacted=False) == 1
    assert runsmod.format_for(None, big, compacted=True) == 2
    assert runsmod.format_for(None, small, compacted=True) == 1  # small: stays raw
    assert runsmod.format_for(None, None, compacted=True) == 1
    for forced in (1, 2):
        for keys in (None, small, big):
            assert runsmod.format_for(forced, keys, compacted=True) == forced
            assert runsmod.format_for(forced, keys, compacted=False) == forced


@pytest.mark.parametrize("run_format,fresh,compacted", [
    (None, "1.1", "2.0"), (1, "1.1", "1.1"), (2, "2.0", "2.0")])
def test_batches_raw_compactions_compressed(tmp_path, monkeypatch, run_format, fresh, compacted):
    """With the threshold lowered to 100 keys: every batch's run is ``fresh``, and a
    compaction of runs over the threshold writes ``compacted``; the store answers the
    same either way (every key found, none twice)."""
    monkeypatch.setattr(runsmod, "COMPRESS_MIN_KEYS", 100)
    rng = np.random.default_rng(5)
    stored = np.empty(0, np.uint64)
    with SeenStore.open(str(tmp_path / "s"), create=True, shard_bits=0, sync=False,
                        bloom=False, run_format=run_format) as s:
        assert s.stats()["run_format"] == fresh
        assert s.stats()["compacted_run_format"] == compacted
        s.compact_between_batches = False
        for _ in range(3):
            batch = rng.integers(0, 2**64, 300, dtype=np.uint64, endpoint=False)
            s.add(batch)
            stored = np.union1d(stored, batch)
        assert _formats(s) == {fresh: 3}
        s.add(np.arange(1, 40, dtype=np.uint64))  # a run below the threshold ...
        stored = np.union1d(stored, np.arange(1, 40, dtype=np.uint64))
        s.compact()
        assert _formats(s) == {compacted: 1}  # ... merged into one over it
        assert len(s) == len(stored) and s.contains(stored).all()
        s.verify()  # raises CorruptionError on a damaged or overlapping run
    with SeenStore.open(str(tmp_path / "t"), create=True, shard_bits=0, sync=False,
                        bloom=False, run_format=run_format) as s:
        s.add(np.arange(1, 40, dtype=np.uint64))
        s.add(np.arange(100, 140, dtype=np.uint64))
        s.compact()  # 78 keys: below the threshold, raw unless forced
        assert _formats(s) == {"2.0" if run_format == 2 else "1.1": 1}


def test_other_run_formats_refused(tmp_path):
    with pytest.raises(InvalidInputError, match="run_format"):
        SeenStore.open(str(tmp_path / "s"), create=True, run_format=3)
