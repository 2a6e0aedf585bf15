"""Per-URL values over a real ``seenstore serve`` subprocess (``--values``): every
value call of ``Client`` (check_update too) against the same calls on a local store
(the oracle), exactly-once check_update,
4xx JSON errors that change nothing, a store without values refused with 409,
updates that survive a SIGKILL, the frontier calls of a ``RemoteStage`` and the
``AsyncClient``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.error
import urllib.request

import numpy as np
import pytest

pytest.importorskip("aiohttp")

from seenstore import Client, DedupStage, SeenStore, State  # noqa: E402
from seenstore.serve.client import ServerError  # noqa: E402
from serveproc import ServerProc, env  # noqa: E402

FIELDS = ("state", "retries", "status", "fetched_at", "next_due", "digest")


@pytest.fixture(scope="module")
def vserver(tmp_path_factory):
    with ServerProc(tmp_path_factory.mktemp("values") / "store", "--values") as s:
        yield s


def _same(a: np.ndarray, b: np.ndarray) -> None:
    for name in ("present",) + FIELDS:
        assert a[name].tolist() == b[name].tolist(), name


def test_value_calls_agree_with_a_local_store(vserver, tmp_path):
    """A seeded sequence of admits and updates (URL and key forms, scalars and arrays,
    rejected URLs, repeats) sent to the server and applied to a local values store:
    after every step, get/counts/select/due/select_urls agree."""
    rng = np.random.default_rng(7)
    pool = [f"http://v{i % 7}.example/p/{i}" for i in range(300)] + ["not a url", ""]
    local = SeenStore.open(tmp_path / "oracle", create=True, values=True, bloom=False)
    with Client(vserver.url) as c:
        for step in range(16):
            urls = [pool[i] for i in rng.integers(0, len(pool), 60)]
            if step % 4 == 0:
                assert c.add_urls(urls).tolist() == local.add_urls(urls).tolist()
            elif step % 4 == 1:  # admit with records: a new URL takes its first occurrence's
                init = {"state": int(rng.integers(0, 5)),
                        "next_due": rng.integers(0, 50, len(urls)).tolist()}
                got = c.check_update_urls(urls, **init)
                assert got.tolist() == local.check_update_urls(urls, **init).tolist()
            else:
                fields = {"state": int(rng.integers(0, 5)),
                          "status": rng.integers(100, 600, len(urls)).tolist(),
                          "next_due": rng.integers(0, 50, len(urls)).tolist()}
                if step % 2:
                    fields["digest"] = (rng.integers(0, 2**63, len(urls)).astype(np.uint64)
                                        * np.uint64(2)).tolist()  # above 2^63 too
                got = c.update_urls(urls, **fields)
                assert got.tolist() == local.update_urls(urls, **fields).tolist()
            probe = [pool[i] for i in rng.integers(0, len(pool), 40)]
            _same(c.get_urls(probe), local.get_urls(probe))
            assert c.counts() == local.counts()
            for s in State:
                assert c.select(s).tolist() == local.select(s).tolist()
            assert c.due(25).tolist() == local.due(25).tolist()
            assert c.due(25, limit=3).tolist() == local.due(25, limit=3).tolist()
            assert c.select_urls(State.DONE, limit=5) == local.select_urls(State.DONE, 5)
            assert c.due_urls(40) == local.due_urls(40)
        # the key forms: a key the store lacks is not updated and reads absent
        keys = np.append(local.select(State.QUEUED, limit=5), np.uint64(12345))
        got = c.update(keys, retries=[1, 2, 3, 4, 5, 6][:len(keys)], fetched_at=99)
        want = local.update(keys, retries=[1, 2, 3, 4, 5, 6][:len(keys)], fetched_at=99)
        assert got.tolist() == want.tolist() and not got[-1]
        _same(c.get(keys), local.get(keys))
        # check_update by key: new keys get their record, stored ones keep theirs
        keys = np.append(keys[:3], np.array([7, 8, 7], dtype=np.uint64))
        init = {"state": 3, "retries": [1, 2, 3, 4, 5, 6]}
        assert c.check_update(keys, **init).tolist() == local.check_update(keys, **init).tolist()
        _same(c.get(keys), local.get(keys))
        assert sum(c.counts().values()) == len(local) == c.stats()["keys"]
    local.close()


def _request(url: str, body: bytes | None, method: str = "POST") -> tuple[int, dict]:
    req = urllib.request.Request(url, data=body, method=method)
    try:
        with urllib.request.urlopen(req) as r:
            return r.status, {}
    except urllib.error.HTTPError as e:
        data = e.read()
        assert data.count(b"\n") == 0
        return e.code, json.loads(data)


def test_bad_value_requests_are_4xx_and_change_nothing(vserver):
    u = vserver.url
    with Client(u) as c:
        c.add_urls(["http://bad.example/a", "http://bad.example/b"])
        before = c.counts()
        recs = c.get_urls(["http://bad.example/a", "http://bad.example/b"])
        cases = [
            ("/v1/keys/update", b'{"keys": [1], "bogus": 1}', 400, "unknown value field"),
            ("/v1/keys/update", b"[1, 2]", 400, "one JSON object"),
            ("/v1/keys/update", b"{not json", 400, "one JSON object"),
            ("/v1/keys/update", b"[" * 100_000, 400, "one JSON object"),
            ("/v1/evidence", b"[" * 100_000, 400, "not JSON"),
            ("/v1/keys/update", b'{"keys": [1]}', 400, "at least one field"),
            ("/v1/keys/update", b'{"keys": [-1], "state": 1}', 400, "integers"),
            ("/v1/keys/update", b'{"keys": [1, 2], "state": [1]}', 400, "1 values for 2"),
            ("/v1/keys/update", b'{"keys": [1], "state": 9}', 400, "out of range"),
            ("/v1/urls/update", b'{"urls": ["http://bad.example/a"], "state": NaN}', 400,
             "finite"),
            ("/v1/keys/update", b'{"keys": [1], "status": "x"}', 400, "a number"),
            ("/v1/keys/update", b'{"keys": [1], "status": [null]}', 400, "numbers"),
            ("/v1/keys/update", b'{"keys": [1], "urls": ["a"], "state": 1}', 400,
             "exactly one"),
            ("/v1/urls/update", b'{"keys": [1], "state": 1}', 400, 'takes "urls"'),
            ("/v1/urls/update", b'{"urls": ["http://bad.example/a"], "state": "GONE"}', 400,
             "unknown state"),
            ("/v1/urls/update", b'{"urls": ["x"], "base": "nope", "state": 1}', 400, "base"),
            ("/v1/keys/get", b"1234567", 400, "multiple of 8"),
            ("/v1/keys/get?format=xml", b"", 400, "format"),
            ("/v1/values/due", None, 400, "now="),
            ("/v1/values/due?now=5&limit=-1", None, 400, "limit"),
            ("/v1/values/select?state=zz", None, 400, "unknown state"),
            ("/v1/values/select?state=DONE&answer=xml", None, 400, "answer"),
        ]
        for path, body, status, word in cases:
            got, doc = _request(u + path, body, "POST" if body is not None else "GET")
            assert got == status and doc["status"] == status, (path, got, doc)
            assert word in doc["error"], (path, doc)
        with pytest.raises(ValueError, match="now"):  # refused before it is sent
            c.due(float("nan"))
        assert c.counts() == before
        _same(c.get_urls(["http://bad.example/a", "http://bad.example/b"]), recs)


def test_a_store_without_values_refuses_value_calls(tmp_path):
    with ServerProc(tmp_path / "plain") as s, Client(s.url) as c:
        c.add_urls(["http://plain.example/"])
        for call in (c.counts, lambda: c.get([1]), lambda: c.update([1], state=1),
                     lambda: c.select(State.DONE), lambda: c.due(1)):
            with pytest.raises(ServerError, match="keeps no values") as e:
                call()
            assert e.value.status == 409
        assert c.contains_urls(["http://plain.example/"]).tolist() == [True]
    # --values on that store: one line, a non-zero exit, the store as it was
    r = subprocess.run([sys.executable, "-m", "seenstore.cli", "serve", "--store",
                        str(tmp_path / "plain"), "--values", "--listen", "127.0.0.1:0"],
                       capture_output=True, text=True, env=env(), timeout=120)
    assert r.returncode != 0 and "Traceback" not in r.stderr
    assert "values" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not SeenStore.open(tmp_path / "plain", bloom=False).values


def test_updates_survive_a_sigkill(tmp_path):
    store = tmp_path / "store"
    urls = [f"http://kill.example/{i}" for i in range(50)]
    srv = ServerProc(store, "--values").start()
    try:
        with Client(srv.url) as c:
            c.add_urls(urls)
            assert c.update_urls(urls[:20], state=State.DONE, status=200).all()
            assert c.update_urls(urls[20:30], state="FAILED", retries=2).all()
    finally:
        assert srv.stop(signal.SIGKILL) == -signal.SIGKILL
    with ServerProc(store) as srv, Client(srv.url) as c:  # no --values: the store keeps them
        counts = c.counts()
        assert counts[State.DONE] == 20 and counts[State.FAILED] == 10
        assert counts[State.QUEUED] == 20
        rec = c.get_urls(urls)
        assert rec["status"][:20].tolist() == [200] * 20
        assert rec["retries"][20:30].tolist() == [2] * 10


def test_remote_stage_keeps_the_frontier_in_the_server(vserver):
    urls = [f"http://stage.example/{i}" for i in range(30)]
    with Client(vserver.url) as c:
        flying = c.select_urls(State.IN_FLIGHT)  # other tests' (the server is shared)
    with DedupStage.open(vserver.url) as st:
        before = st.counts()
        got = st.offer(urls)
        assert got.now == 30 and len(got.payloads) == 30
        assert st.mark(list(got.payloads[:10]), State.IN_FLIGHT) == 10
        assert st.mark(got.keys[10:15], "DONE", status=200, fetched_at=7) == 5
        assert st.mark(["http://stage.example/99"], State.DONE) == 0  # never offered
        counts = st.counts()
        assert counts[State.IN_FLIGHT] - before[State.IN_FLIGHT] == 10
        assert counts[State.DONE] - before[State.DONE] == 5
        assert sum(counts.values()) == sum(before.values()) + 30
        back = st.requeue()
        assert sorted(back) == sorted(flying + got.payloads[:10])  # the server keeps URLs
        after = st.counts()
        assert after[State.IN_FLIGHT] == 0
        assert after[State.QUEUED] == counts[State.QUEUED] + 10 + len(flying)


def test_async_client_has_the_value_calls(vserver):
    import asyncio

    from seenstore import AsyncClient

    async def main():
        async with AsyncClient(vserver.url) as c:
            urls = ["http://async-v.example/1", "http://async-v.example/2"]
            assert (await c.check_update_urls(urls, retries=[5, 6])).all()
            assert (await c.check_update([2**64 - 1], digest=3)).tolist() == [True]
            assert (await c.get([2**64 - 1]))["digest"].tolist() == [3]
            assert (await c.update_urls(urls, state="DONE", next_due=[3, 4])).all()
            rec = await c.get_urls(urls)
            assert rec["state"].tolist() == [2, 2] and rec["next_due"].tolist() == [3, 4]
            keys = await c.due(3)
            assert len(keys) >= 1 and (await c.get(keys))["next_due"].max() <= 3
            assert "http://async-v.example/1" in await c.due_urls(3)
            done = await c.select(State.DONE)
            assert len(done) >= 2 and ((await c.get(done))["state"] == State.DONE).all()
            assert "http://async-v.example/2" in await c.select_urls("done")
            assert (await c.update(keys, retries=1)).all()
            assert (await c.counts())[State.DONE] >= 2
            # fetch evidence and learning, awaitable too (report only: apply=False)
            got = await c.record_fetches([{"url": u, "status": 200, "body": "<p>x</p>"}
                                          for u in urls] + [{"url": "mailto:x", "status": 1}])
            assert got["recorded"] == 2 and len(got["rejected"]) == 1
            out = await c.learn(apply=False)
            assert out["policy_version"] == 0 and out["rebuild"] is None

    asyncio.run(main())


def test_values_follow_a_learned_rule(tmp_path):
    """Records set before the server learns a rule come with the pages' new keys (the
    rebuild carries them), and URL calls after it are keyed under the new policy:
    another session id reads and updates the same record."""
    page = "<html><body><p>" + "alpha beta gamma " * 20 + "item {}</p></body></html>"
    with ServerProc(tmp_path / "store", "--values") as srv, Client(srv.url) as c:
        variants = [f"http://shop.test/item/{n}?sid=x" for n in range(8)]
        assert c.add_urls(variants).all()
        assert c.update_urls(variants, state="DONE", status=200, fetched_at=5).all()
        c.record_fetches([{"url": f"http://shop.test/item/{n}?sid={sid}", "status": 200,
                           "body": page.format(n)} for n in range(8) for sid in "abc"])
        assert c.learn()["rebuild"]["keys_added"] == 8
        other = [f"http://shop.test/item/{n}?sid=zz" for n in range(8)]
        rec = c.get_urls(other)
        assert rec["present"].all() and (rec["state"] == State.DONE).all()
        assert (rec["fetched_at"] == 5).all()
        assert c.update_urls(other[:3], state="FAILED", retries=1).all()
        assert c.counts()[State.FAILED] == 3 and c.counts()[State.DONE] == 5
        assert sum(c.counts().values()) == c.stats()["keys"] == 8


def test_check_update_is_exactly_once_and_a_bad_request_spoils_no_group(vserver):
    """A check_update sent twice with one batch id gets its first answer (its records
    written once); other fields under that id are refused; a request with a bad field
    is refused before it joins a group, while other clients' requests commit."""
    urls = [f"http://cu.example/{i}" for i in range(20)]
    with Client(vserver.url) as c:
        body = json.dumps({"urls": urls, "state": "IN_FLIGHT", "next_due": 4}).encode()
        first = c._call("POST", "/v1/urls/check_update", body, batch_id="cu-1")
        c.update_urls(urls[:5], state="DONE")
        again = c._call("POST", "/v1/urls/check_update", body, batch_id="cu-1")
        assert first == again == b"\1" * 20
        rec = c.get_urls(urls)
        assert rec["state"].tolist() == [2] * 5 + [1] * 15  # not written twice
        with pytest.raises(ServerError, match="another request") as e:
            c._call("POST", "/v1/urls/check_update",
                    json.dumps({"urls": urls, "state": 0}).encode(), batch_id="cu-1")
        assert e.value.status == 400
        got, errors = [], []

        def bad():
            try:
                c2 = Client(vserver.url)
                c2.check_update_urls(["http://cu.example/bad"], state=9)
            except ServerError as err:
                errors.append(err.status)

        import threading

        t = threading.Thread(target=bad)
        t.start()
        got.append(c.check_update_urls(["http://cu.example/ok", "http://cu.example/0"],
                                       retries=2))
        t.join()
        assert errors == [400] and got[0].tolist() == [True, False]
        assert not c.contains_urls(["http://cu.example/bad"])[0]
        assert c.get_urls(["http://cu.example/ok"])["retries"].tolist() == [2]
