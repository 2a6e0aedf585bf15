"""Run formats by default: runs of COMPRESS_MIN_KEYS keys or more compressed (compaction's
larger outputs, a batch's run only when it is that large), smaller ones raw
(runs.live.format_for); run_format=1 / 2 force one format for every run."""

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
    assert runsmod.format_for(None, big) == 2
    assert runsmod.format_for(None, small) == 1
    assert runsmod.format_for(None, None) == 1  # not known (a spilled batch's run): raw
    for forced in (1, 2):
        for keys in (None, small, big):
            assert runsmod.format_for(forced, keys) == forced


@pytest.mark.parametrize("run_format,small,large", [
    (None, "1.1", "2.0"), (1, "1.1", "1.1"), (2, "2.0", "2.0")])
def test_small_runs_raw_large_runs_compressed(tmp_path, monkeypatch, run_format, small, large):
    """With the threshold lowered to 100 keys: batches of fewer new keys write ``small``
    runs, a compaction into a run over the threshold and a batch of more new keys write
    ``large`` ones; the store answers the same either way."""
    monkeypatch.setattr(runsmod, "COMPRESS_MIN_KEYS", 100)
    rng = np.random.default_rng(5)
    stored = np.empty(0, np.uint64)
    with SeenStore.open(str(tmp_path / "s"), create=True, shard_bits=0, sync=False,
                        bloom=False, run_format=run_format) as s:
        assert (s.stats()["run_format"], s.stats()["large_run_format"]) == (small, large)
        s.compact_between_batches = False
        for _ in range(3):
            batch = rng.integers(0, 2**64, 60, dtype=np.uint64, endpoint=False)
            s.add(batch)
            stored = np.union1d(stored, batch)
        assert _formats(s) == {small: 3}
        s.compact()  # 180 keys: over the threshold
        assert _formats(s) == {large: 1}
        batch = rng.integers(0, 2**64, 150, dtype=np.uint64, endpoint=False)
        s.add(batch)  # a batch's run over the threshold
        stored = np.union1d(stored, batch)
        assert _formats(s) == {large: 2}
        assert len(s) == len(stored) and s.contains(stored).all()
        assert not s.contains(np.setdiff1d(np.arange(1000, dtype=np.uint64), stored)).any()
        s.verify()  # raises CorruptionError on a damaged or overlapping run


def test_other_run_formats_refused(tmp_path):
    with pytest.raises(InvalidInputError, match="run_format"):
        SeenStore.open(str(tmp_path / "s"), create=True, run_format=3)
