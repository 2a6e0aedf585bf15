"""``seenstore select``, ``seenstore due`` and ``seenstore forget`` on a store with
values: what they print matches the store's own calls, and forgetting makes URLs
new again."""

from __future__ import annotations

import json

import numpy as np
from clirun import cli_bytes

from seenstore.frontier.state import State
from seenstore.store import SeenStore

URLS = [f"http://a.test/p{i}" for i in range(12)] + ["http://b.test/x", "http://b.test/y"]


def _store(path: str) -> None:
    with SeenStore.open(path, create=True, values=True, sync=False) as s:
        s.check_update_urls(URLS)
        s.update_urls(URLS[:3], state=State.IN_FLIGHT)
        s.update_urls(URLS[3:5], state=State.DONE, next_due=np.array([500, 100]))
        s.update_urls(URLS[5:6], state=State.FAILED, next_due=2000)


def test_select_due_and_forget(tmp_path):
    store = str(tmp_path / "s")
    _store(store)
    out = cli_bytes("select", "--state", "in_flight", "--store", store).stdout.decode()
    assert sorted(out.split()) == sorted(URLS[:3])
    doc = json.loads(cli_bytes("select", "--state", "0", "--store", store, "--json").stdout)
    assert doc["count"] == len(URLS) - 6 and sorted(doc["urls"]) == sorted(URLS[6:])
    keys = cli_bytes("select", "--state", "DONE", "--format", "keys", "--store", store).stdout
    with SeenStore.open(store, readonly=True) as s:
        assert [int(k, 16) for k in keys.split()] == s.select(State.DONE).tolist()
    # due: oldest first, only those due by --now
    out = cli_bytes("due", "--now", "1000", "--store", store).stdout.decode().split()
    assert out == [URLS[4], URLS[3]]
    raw = cli_bytes("due", "--now", "3000", "--format", "raw", "--store", store).stdout
    assert len(np.frombuffer(raw, "<u8")) == 3
    for now in ("nan", "inf", "1e30"):
        bad = cli_bytes("due", "--now", now, "--store", store, check=False)
        assert bad.returncode == 2 and b"--now" in bad.stderr and b"Traceback" not in bad.stderr
    bad = cli_bytes("select", "--state", "LOST", "--store", store, check=False)
    assert bad.returncode == 3 and b"QUEUED (0)" in bad.stderr and b"Traceback" not in bad.stderr

    # forget URLs and a host: absent, counted out, new again when offered
    doc = json.loads(cli_bytes("forget", URLS[0], URLS[1], "--host", "b.test", "--store", store,
                               "--json").stdout)
    assert doc["forgotten"] == 4 and doc["hosts"] == {"b.test": 2}
    with SeenStore.open(store, sync=False) as s:
        assert len(s) == len(URLS) - 4 and sum(s.counts().values()) == len(s)
        assert s.contains_urls(URLS[:3]).tolist() == [False, False, True]
        assert s.add_urls([URLS[0], "http://b.test/x"]).tolist() == [True, True]
        assert s.get_urls([URLS[0]])["state"][0] == State.QUEUED  # a fresh record
    assert cli_bytes("forget", "--store", store, check=False).returncode == 2

    # --keys FILE (raw uint64): the keys are forgotten; a torn or missing file is refused
    from seenstore.url.fingerprint import fingerprint_many

    with SeenStore.open(store, readonly=True) as s:
        assert s.contains_urls([URLS[2]])[0]
    kf = tmp_path / "keys.bin"
    fingerprint_many([URLS[2]]).astype("<u8").tofile(str(kf))
    doc = json.loads(cli_bytes("forget", "--keys", str(kf), "--store", store, "--json").stdout)
    assert doc["forgotten"] == 1 and doc["keys"] == len(URLS) - 3
    doc = json.loads(cli_bytes("forget", "--keys", "-", "--store", store, "--json",
                               stdin=kf.read_bytes()).stdout)
    assert doc["forgotten"] == 0  # already forgotten
    (tmp_path / "torn.bin").write_bytes(b"\0" * 7)
    for path, code in ((tmp_path / "torn.bin", 3), (tmp_path / "none.bin", 3)):
        bad = cli_bytes("forget", "--keys", str(path), "--store", store, check=False)
        assert bad.returncode == code and b"Traceback" not in bad.stderr, bad.stderr
