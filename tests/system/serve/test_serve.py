"""``seenstore serve`` as a real subprocess on 127.0.0.1: exactly-once answers to
concurrent clients, 4xx JSON errors, the token rule, SIGTERM (drain, exit 0),
SIGKILL + restart (a retried batch id gets its first answer), the answer log's
recovery rules, and the status page in headless Chromium."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import threading
import urllib.request

import numpy as np
import pytest

pytest.importorskip("aiohttp")

from seenstore import Client, normalise  # noqa: E402
from seenstore.errors import InvalidInputError  # noqa: E402
from seenstore.serve.client import ServerError  # noqa: E402
from seenstore.serve.server import check_listen, is_loopback  # noqa: E402
from serveproc import ServerProc, env  # noqa: E402


@pytest.fixture
def server(tmp_path):
    with ServerProc(tmp_path / "store", "--max-delay", "5", "--max-body", "1M") as s:
        yield s


def _urls(client_id: int, n: int) -> list[str]:
    """URLs of client ``client_id``: half its own, half shared with every client, in
    spellings that normalise alike (case, default port)."""
    own = [f"http://c{client_id}.example/p/{i}" for i in range(n // 2)]
    shared = [f"HTTP://Shared.Example:80/p/{i}" if (i + client_id) % 2 else
              f"http://shared.example/p/{i}" for i in range(n // 2)]
    out = [u for pair in zip(own, shared) for u in pair]
    return out


def test_concurrent_clients_get_each_url_new_exactly_once(server):
    n_clients, n, chunk = 6, 1200, 100
    answers: dict[int, list[str]] = {}
    errors = []

    def run(c: int) -> None:
        try:
            urls = _urls(c, n)
            mine = []
            with Client(server.url) as cl:
                for i in range(0, n, chunk):
                    part = urls[i:i + chunk]
                    mask = cl.add_urls(part)
                    assert len(mask) == len(part)
                    mine += [u for u, m in zip(part, mask) if m]
                # keys beside URLs: half overlap between neighbours
                keys = np.arange(c * 500, c * 500 + 1000, dtype=np.uint64) + (1 << 63)
                answers[100 + c] = [int(k) for k, m in zip(keys, cl.add(keys)) if m]
            answers[c] = mine
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=run, args=(c,)) for c in range(n_clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    new = [normalise(u) for c in range(n_clients) for u in answers[c]]
    distinct = {normalise(u) for c in range(n_clients) for u in _urls(c, n)}
    assert len(new) == len(set(new))  # none twice
    assert set(new) == distinct        # the union is every distinct URL
    keys = [k for c in range(n_clients) for k in answers[100 + c]]
    assert len(keys) == len(set(keys)) == n_clients * 500 + 500
    with Client(server.url) as cl:
        st = cl.stats()
        assert st["keys"] == len(distinct) + len(keys)
        assert st["groups"] < n_clients * (n // chunk + 1)  # requests shared groups
        assert cl.contains_urls(["http://SHARED.example/p/3", "http://nowhere.example/",
                                 "mailto:x"]).tolist() == [True, False, False]
        # relative to a base: c0's own /p/1 is seen, /p/new is not
        assert cl.add_urls(["/p/1", "/p/new"], base="http://c0.example/").tolist() == [
            False, True]


def _metrics(url: str) -> dict:
    """GET /metrics parsed: {name{labels}: value}; every sample has its # TYPE line."""
    status, body = _post(f"{url}/metrics", method="GET")
    assert status == 200
    typed, out = set(), {}
    for line in body.decode().splitlines():
        if line.startswith("# TYPE "):
            typed.add(line.split()[2])
        elif line and not line.startswith("#"):
            name, value = line.rsplit(" ", 1)
            base = name.split("{")[0]
            assert base in typed or base.rsplit("_", 1)[0] in typed, line
            out[name] = float(value)
    return out


@pytest.mark.parametrize("bloom", [False, True])
def test_metrics_agree_with_stats_with_and_without_the_filter(tmp_path, bloom):
    """GET /metrics in Prometheus text: keys, batches, the latency histogram, runs,
    compaction, queue depth; the Bloom filter's rate and bytes only with --bloom (the
    server admits by the exact sweep without it, docs/serve.md "Memory")."""
    args = ["--max-delay", "1"] + (["--bloom"] if bloom else [])
    with ServerProc(tmp_path / "store", *args) as s, Client(s.url) as cl:
        urls = [f"http://m{i % 7}.example/p/{i}" for i in range(3000)]
        assert cl.add_urls(urls).all()
        assert not cl.add_urls(urls[:1000]).any()
        assert not cl.contains_urls(["http://absent.example/"]).any()
        m, st = _metrics(s.url), cl.stats()
        assert m["seenstore_keys"] == st["keys"] == 3000
        assert m["seenstore_keys_new_total"] == 3000
        assert m["seenstore_keys_offered_total"] == 4000
        assert m["seenstore_batches_total"] == st["groups"] >= 2
        count = m["seenstore_batch_latency_seconds_count"]
        assert count == st["groups"]
        assert m['seenstore_batch_latency_seconds_bucket{le="+Inf"}'] == count
        assert m["seenstore_runs"] >= 1 and m["seenstore_queue_depth"] == 0
        assert "seenstore_compaction_pending_jobs" in m
        if bloom:
            assert 0 < m["seenstore_bloom_false_positive_rate"] < 1e-2
            assert m["seenstore_bloom_bytes"] == st["store_stats"]["bloom"]["bytes"] > 0
        else:
            assert "seenstore_bloom_bytes" not in m
            assert "seenstore_bloom_false_positive_rate" not in m


def _post(url: str, body: bytes = b"", headers: dict | None = None, method: str = "POST"):
    req = urllib.request.Request(url, data=body if method == "POST" else None,
                                 headers=headers or {}, method=method)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_client_errors_are_4xx_with_one_line_json(server):
    u = server.url
    cases = [
        (f"{u}/v1/keys/add", b"abc", {}, "POST", 400, "multiple of 8"),
        (f"{u}/v1/urls/add", b"http://a.example/\n", {"Seenstore-Batch-Id": "bad id!"},
         "POST", 400, "Batch-Id"),
        (f"{u}/v1/urls/add?answer=xml", b"", {}, "POST", 400, "answer"),
        (f"{u}/v1/urls/add?base=notaurl", b"a\n", {}, "POST", 400, "base"),
        (f"{u}/nowhere", b"", {}, "GET", 404, "Not Found"),
        (f"{u}/v1/keys/add", b"", {}, "GET", 405, "Method Not Allowed"),
        (f"{u}/v1/keys/add", b"\0" * (2 << 20), {}, "POST", 413, "limit"),
    ]
    for url, body, headers, method, status, word in cases:
        got, data = _post(url, body, headers, method)
        assert got == status, (url, got, data)
        assert data.count(b"\n") == 0
        doc = json.loads(data)
        assert doc["status"] == status and word in doc["error"], doc
    # a batch id sent again with another body
    with Client(server.url) as cl:
        cl._call("POST", "/v1/keys/add", np.arange(3, dtype="<u8").tobytes(), batch_id="x1")
        with pytest.raises(ServerError, match="another request") as e:
            cl._call("POST", "/v1/keys/add", np.arange(4, dtype="<u8").tobytes(),
                     batch_id="x1")
        assert e.value.status == 400


def test_token_required_off_loopback_and_checked(tmp_path):
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")
    check_listen("127.0.0.1", None)
    check_listen("0.0.0.0", "secret")
    with pytest.raises(ValueError, match="token"):
        check_listen("0.0.0.0", None)
    tok = tmp_path / "token"
    tok.write_text("s3cret\n")
    with ServerProc(tmp_path / "store", "--token-file", str(tok)) as s:
        status, data = _post(f"{s.url}/v1/keys/add", b"\0" * 8)
        assert status == 401 and "token" in json.loads(data)["error"]
        assert _post(f"{s.url}/healthz", method="GET")[0] == 200
        with pytest.raises(ServerError) as e:
            Client(s.url, token="wrong").add([1])
        assert e.value.status == 401
        with Client(s.url, token="s3cret") as cl:
            assert cl.add([1, 2, 1]).tolist() == [True, True, False]
    # a token file that cannot serve: one line, exit 2, before the store is opened
    bad = tmp_path / "bad-token"
    for content in (b"\xff\xfe", b"\n"):
        bad.write_bytes(content)
        r = subprocess.run([sys.executable, "-m", "seenstore.cli", "serve", "--store",
                            str(tmp_path / "store"), "--token-file", str(bad), "--listen",
                            "0.0.0.0:0"], capture_output=True, text=True, env=env(),
                           timeout=60)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
        assert len(r.stderr.strip().splitlines()) == 1 and "--token-file" in r.stderr


def test_sigterm_finishes_queued_requests_and_exits_0(tmp_path):
    s = ServerProc(tmp_path / "store", "--max-delay", "300").start()
    got, errors = [], []

    def one(i: int) -> None:
        try:
            with Client(s.url, retry_seconds=0) as cl:
                got.append(int(cl.add(np.arange(i * 10, i * 10 + 10, dtype=np.uint64)).sum()))
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    import time

    time.sleep(0.15)  # the requests wait in the queue (300 ms group delay)
    assert s.stop(signal.SIGTERM) == 0, s.stderr
    for t in threads:
        t.join()
    assert not errors and sorted(got) == [10, 10, 10, 10], (errors, got)
    with ServerProc(tmp_path / "store") as s2, Client(s2.url) as cl:
        assert cl.contains(np.arange(40, dtype=np.uint64)).all()


def test_sigkill_and_restart_a_retried_batch_id_gets_its_first_answer(tmp_path):
    urls = [f"http://k.example/{i}" for i in range(50)] + ["ftp://no"]
    body = ("\n".join(urls) + "\n").encode()
    s = ServerProc(tmp_path / "store").start()
    port = s.port
    with Client(s.url) as cl:
        first = cl._call("POST", "/v1/urls/add", body, batch_id="batch-1")
        more = cl._call("POST", "/v1/urls/add", ("\n".join(urls[:50:2]) + "\n").encode(),
                        batch_id="batch-2")
    assert first == b"\1" * 50 + b"\0" and more == b"\0" * 25
    s.stop(signal.SIGKILL)
    with ServerProc(tmp_path / "store", port=port) as s2, Client(s2.url) as cl:
        assert cl._call("POST", "/v1/urls/add", body, batch_id="batch-1") == first
        assert cl._call("POST", "/v1/urls/add", body, batch_id="batch-3") == b"\0" * 51
        assert cl.stats()["keys"] == 50


def test_client_retries_through_a_restart_with_the_same_batch_id(tmp_path):
    """The server dies under a client; the client's call waits and retries with its
    batch id once a new server listens on the same port."""
    s = ServerProc(tmp_path / "store").start()
    port = s.port
    cl = Client(s.url, retry_seconds=30)
    assert cl.add([5, 6]).tolist() == [True, True]
    s.stop(signal.SIGKILL)
    restarted = []

    def restart():
        import time

        time.sleep(0.5)
        restarted.append(ServerProc(tmp_path / "store", port=port).start())

    t = threading.Thread(target=restart)
    t.start()
    try:
        assert cl.add([6, 7]).tolist() == [False, True]
        assert cl.retries >= 1
    finally:
        t.join()
        cl.close()
        for r in restarted:
            r.stop(signal.SIGKILL)


def test_answer_log_drops_a_group_the_store_never_committed(tmp_path):
    from seenstore.serve.answers import NAME, Answer, AnswerLog

    d = tmp_path / "d"
    d.mkdir()
    log = AnswerLog(str(d), "sid", 0, sync=False)
    e1 = [("a", Answer(1, np.array([True, False])))]
    log.settle(log.append(0, e1), e1)
    e2 = [("b", Answer(2, np.array([True])))]
    log.append(1, e2)  # written, then the process died before the store's commit
    log.close()
    log = AnswerLog(str(d), "sid", 1, sync=False)  # the store has 1 batch: "b" is void
    assert log.lookup("a").mask.tolist() == [True, False] and log.lookup("b") is None
    log.close()
    with open(d / NAME, "ab") as f:
        f.write(b"\x10\0\0\0torn")  # a record cut short at the end: cut off
    log = AnswerLog(str(d), "sid", 1, sync=False)
    assert log.dropped_tail == 8 and log.lookup("a") is not None
    log.close()
    with pytest.raises(ValueError, match="another store|damaged"):
        AnswerLog(str(d), "other", 1, sync=False)


def test_answer_log_memory_is_bounded(tmp_path):
    from seenstore.serve.answers import Answer, AnswerLog

    d = tmp_path / "d"
    d.mkdir()
    log = AnswerLog(str(d), "sid", 0, sync=False, keep=30, max_bytes=1 << 30)
    rng = np.random.default_rng(0)
    masks = {}
    for b in range(100):  # the file never passes max_bytes: memory must be bounded anyway
        entries = []
        for j in range(3):
            m = rng.random(1000) < 0.5
            masks[f"b{b}.{j}"] = m
            entries.append((f"b{b}.{j}", Answer(b, m)))
        log.settle(log.append(b, entries), entries)
    assert len(log.answers) == 30  # the newest ids only
    assert sum(len(p.bits) for p in log.answers.values()) == 30 * 125  # 1 bit per item
    assert log.lookup("b0.0") is None
    assert log.lookup("b99.2").mask.tolist() == masks["b99.2"].tolist()
    log.close()
    log = AnswerLog(str(d), "sid", 100, sync=False, keep=30, max_bytes=1 << 30)
    assert len(log.answers) == 30 and log.lookup("b90.1").mask.tolist() == masks["b90.1"].tolist()
    log.close()


@pytest.mark.skipif(shutil.which("chromium") is None, reason="needs Debian's chromium")
def test_status_page_in_headless_chromium(server):
    sync_api = pytest.importorskip("playwright.sync_api")
    with Client(server.url) as cl:
        for i in range(5):
            cl.add_urls([f"http://page.example/{i}/{j}" for j in range(20)])
        stats = cl.stats()
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"),
                                    args=["--no-sandbox"])
        try:
            page = browser.new_page()
            problems = []
            page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: problems.append(str(e)))
            page.goto(server.url + "/")
            page.wait_for_selector("body[data-loaded='1']", timeout=15000)
            assert page.inner_text("#fig-keys") == str(stats["keys"]) == "100"
            assert page.inner_text("#fig-policy") == stats["policy"] == "safe-v1"
            assert page.inner_text("#fig-groups-committed") == str(stats["groups"])
            assert int(page.get_attribute("#latency", "data-points")) == stats["groups"] >= 1
            assert int(page.get_attribute("#keys", "data-points")) == stats["groups"]
            assert page.locator("#latency polyline").count() == 1
            assert not problems, problems
        finally:
            browser.close()


def test_evidence_and_learning_through_the_server(server):
    """Fetch evidence sent by a client is kept by the server's store; learning there
    adopts the rule, rebuilds, and the next URLs are answered under it."""
    page = ("<html><body><p>" + "alpha beta gamma " * 20 + "item {}</p></body></html>")
    with Client(server.url) as c:
        variants = [f"http://shop.test/item/{n}?sid=x" for n in range(8)]
        assert c.add_urls(variants).tolist() == [True] * 8
        records = [{"url": f"http://shop.test/item/{n}?sid={sid}", "status": 200,
                    "body": page.format(n)} for n in range(8) for sid in ("a", "b", "c")]
        records.append({"url": "mailto:x", "status": 200})
        got = c.record_fetches(records)
        assert got["recorded"] == 24 and len(got["rejected"]) == 1
        out = c.learn()
        assert out["policy_version"] == 1 and out["rebuild"]["keys_added"] == 8
        assert {(f["host"], f["name"]) for f in out["findings"]
                if f["status"] == "adopted"} == {("shop.test", "sid")}
        # under the learned rule another session id is the same page
        assert c.add_urls(["http://shop.test/item/3?sid=zzz"]).tolist() == [False]
        assert c.stats()["policy_id"] == out["policy_id"]


def test_dedup_stages_over_one_server_hand_each_url_out_once(server):
    """``DedupStage.open("http://...")``: a stage per crawler process over the server's
    store; the URLs handed out by all of them are the distinct URLs, none twice."""
    from seenstore import DedupStage

    got: list[list[str]] = [[], [], []]
    errors: list = []

    def crawl(i):
        try:
            _crawl(i)
        except Exception as e:  # noqa: BLE001 (reported by the test thread)
            errors.append(e)

    def _crawl(i):
        with DedupStage.open(server.url) as stage:
            for start in range(0, 600, 50):
                urls = [f"http://s.test/p/{(j * (i + 1)) % 400}" for j in range(start, start + 50)]
                urls.append("mailto:nobody")
                res = stage.offer(urls)
                assert [r for _, r in res.rejected] and len(res.keys) == len(res.payloads)
                got[i] += [u for _, u in res]
            assert len(stage.flush()) == 0

    threads = [threading.Thread(target=crawl, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    every = [u for g in got for u in g]
    assert len(every) == len(set(every)) == 400
    with DedupStage.open(server.url) as stage:
        assert len(stage.offer(np.array([1, 2, 2], dtype=np.uint64))) == 2
        assert len(stage.offer(["HTTP://S.test:80/p/7#x"])) == 0


def test_a_remote_stage_refuses_what_a_local_stage_refuses(server, tmp_path):
    """``offer`` checks its items the same way over the server as on a local store
    (admitted.offered_items): a list mixing URLs and keys, a mapping, a lone number
    are InvalidInputError, and the call admits nothing (a remote stage rejected the
    odd items one by one and admitted the URLs among them)."""
    from seenstore import DedupStage
    from seenstore.store import wal

    bad = [["http://mix.test/1", 5], ["http://mix.test/1", b"http://mix.test/2", 3.5],
           {"http://mix.test/1": 1}, 42]
    with DedupStage.open(server.url) as remote, \
            DedupStage.open(str(tmp_path / "local"), create=True, sync=False,
                            wal_sync=wal.SYNC_NEVER) as local:
        for items in bad:
            for stage in (remote, local):
                with pytest.raises(InvalidInputError) as e:
                    stage.offer(items)
                if isinstance(items, list):
                    assert "mixes URLs and other items" in str(e.value)
        for stage in (remote, local):  # nothing of the refused calls was admitted
            assert len(stage.offer(["http://mix.test/1", b"http://mix.test/2"])) == 2


def test_async_client_has_the_store_calls(server):
    import asyncio

    from seenstore import AsyncClient

    async def main():
        async with AsyncClient(server.url) as c:
            a, b = await asyncio.gather(c.add_urls(["http://as.test/1", "http://as.test/2"]),
                                        c.add_urls(["http://as.test/2", "HTTP://AS.test/3"]))
            assert a.tolist().count(True) + b.tolist().count(True) == 3
            assert (await c.contains_urls(["http://as.test/3", "http://as.test/9"])).tolist() \
                == [True, False]
            assert (await c.add(np.array([5, 5, 6], dtype=np.uint64))).tolist() == [
                True, False, True]
            assert (await c.contains([6, 7])).tolist() == [True, False]
            assert (await c.stats())["keys"] >= 5

    asyncio.run(main())
