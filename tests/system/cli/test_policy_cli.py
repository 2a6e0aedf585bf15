"""The policy commands on a real store: `policy` (print, --set with a rebuild),
`rebuild --host`, `learn` (from the store's evidence and from a WARC written by
warcio; --dry-run, --write-policy, --json), `duplicates`, `normalise --store`, and
the store-level life of a learned rule: adopted, then withdrawn by later evidence,
each time rebuilt."""

from __future__ import annotations

import io
import json

import numpy as np
from click.testing import CliRunner

from seenstore.cli import main
from seenstore.store import SeenStore


def run(*args, ok=True):
    r = CliRunner().invoke(main, list(args))
    if ok:
        assert r.exit_code == 0, r.output
    return r


def page(n: int, words: str = "") -> bytes:
    return (f"<html><body><h1>Item {n}</h1><p>{'alpha beta gamma ' * 20} number {n} "
            f"{words}</p></body></html>").encode()


def sid_evidence(store, host="shop.test", items=8, counter=False):
    """Item pages fetched with a session id the site ignores; ``counter``: the same
    spelling pattern serving different pages (sid selects content after all)."""
    for n in range(items):
        for sid in ("a1", "b2", "c3"):
            body = page(n, f"session {sid}" if counter else "")
            store.record_fetch(f"http://{host}/item/{n}?sid={sid}", 200, body=body)


def keys(store) -> set:
    return set(np.concatenate(list(store.iter_keys()) or [np.empty(0, np.uint64)]).tolist())


def test_a_learned_rule_is_adopted_then_withdrawn_and_each_time_rebuilt(tmp_path):
    path = str(tmp_path / "s")
    variants = [f"http://shop.test/item/{n}?sid={s}" for n in range(8) for s in ("x", "y")]
    with SeenStore.open(path, create=True, sync=False) as store:
        store.add_urls(variants)
        assert len(store) == 16
        sid_evidence(store)
        found = store.learn()
        assert any(f.host == "shop.test" and f.kind == "strip_params" and f.name == "sid"
                   and f.status == "adopted" for f in found)
        assert store.policy_version == 1 and len(store) == 8  # rebuilt: one key per item
        assert store.add_urls(["http://shop.test/item/3?sid=zzz"]).tolist() == [False]
        sid_evidence(store, counter=True)  # later fetches: sid selects the page
        found = store.learn()
        assert any(f.host == "shop.test" and f.name == "sid" and f.status == "withdrawn"
                   for f in found), found
        assert store.policy_version == 2 and "sid" not in store.policy.to_toml()
        # rebuilt from the kept spellings: the 16 first offered are 16 keys again
        assert len(store) == 16 and store.contains_urls(
            ["http://shop.test/item/3?sid=x", "http://shop.test/item/3?sid=y"]).tolist() == [
            True, True]
        assert store.add_urls(["http://shop.test/item/3?sid=zzz"]).tolist() == [True]
    r = run("policy", "--store", path, "--json")
    assert json.loads(r.output)["version"] == 2


def test_policy_print_set_rebuild_and_normalise_under_the_store(tmp_path):
    path = str(tmp_path / "s")
    src = tmp_path / "urls.txt"
    src.write_text("http://www.a.test/x?b=2&a=1\nhttp://a.test/x?a=1&b=2\nhttp://b.test/y\n")
    run("add", str(src), "--store", path)
    r = run("policy", "--store", path)
    assert 'version = "safe-v1"' in r.output or "safe-v1" in r.output
    pol = tmp_path / "p.toml"
    pol.write_text('version = "p1"\n[[rule]]\nhosts = ["a.test"]\nsort_query = true\n'
                   'strip_www = true\n')
    r = run("policy", "--store", path, "--set", str(pol), "--json")
    doc = json.loads(r.output)
    assert doc["version"] == 1 and doc["rebuild"]["keys_removed"] >= 2
    with SeenStore.open(path, readonly=True) as store:
        assert len(store) == 2 and store.policy.identity == doc["to"]
    r = run("normalise", "--store", path, "http://www.a.test/x?b=2&a=1")
    assert r.output.strip() == "http://a.test/x?a=1&b=2"
    r = run("rebuild", "--store", path, "--host", "a.test", "--json")
    assert json.loads(r.output)["kept_urls"] == 2
    r = run("add", str(src), "--store", path)  # the store's policy, no --policy
    assert r.stdout == ""
    bad = tmp_path / "other.toml"
    bad.write_text('version = "zz"\n')
    assert run("add", str(src), "--store", path, "--policy", str(bad), ok=False).exit_code == 3
    keys_only = str(tmp_path / "k")
    batch = tmp_path / "b.bin"
    batch.write_bytes(np.arange(1, 9, dtype="<u8").tobytes())
    run("merge", str(batch), "--store", keys_only, "--create")
    r = run("policy", "--store", keys_only, "--set", str(pol), ok=False)
    assert r.exit_code == 3 and "keeps no URLs" in r.output


def test_learn_from_a_warc_dry_run_write_policy_and_duplicates(tmp_path):
    from warcio.statusandheaders import StatusAndHeaders
    from warcio.warcwriter import WARCWriter

    warc = tmp_path / "crawl.warc.gz"
    with open(warc, "wb") as f:
        w = WARCWriter(f, gzip=True)
        for n in range(8):
            for sid in ("a1", "b2", "c3"):
                h = StatusAndHeaders("200 OK", [("Content-Type", "text/html")],
                                     protocol="HTTP/1.1")
                w.write_record(w.create_warc_record(
                    f"http://shop.test/item/{n}?sid={sid}", "response",
                    payload=io.BytesIO(page(n)), http_headers=h))
        h = StatusAndHeaders("301 Moved", [("Location", "http://shop.test/item/0?sid=a1")],
                             protocol="HTTP/1.1")
        w.write_record(w.create_warc_record("http://shop.test/old", "response",
                                            payload=io.BytesIO(b""), http_headers=h))
    path = str(tmp_path / "s")
    r = run("learn", str(warc), "--store", path, "--dry-run", "--json", ok=False)
    assert r.exit_code != 0  # a dry run does not create the store
    out = tmp_path / "learned.toml"
    r = run("learn", str(warc), "--store", path, "--json", "--write-policy", str(out))
    doc = json.loads(r.output)
    assert doc["recorded"] == 25 and doc["policy_version"] == 1
    assert {(f["host"], f["name"]) for f in doc["findings"] if f["status"] == "adopted"} == {
        ("shop.test", "sid")}
    assert '"sid"' in out.read_text() and "# learned: strip_params=sid" in out.read_text()
    r = run("learn", "--store", path, "--dry-run", "--json")  # from the kept evidence
    assert json.loads(r.output)["fetches"] == 25 and json.loads(r.output)["dry_run"]
    r = run("duplicates", "--store", path, "--json")
    report = json.loads(r.output)
    assert report["duplicates"] == 0  # the policy merges every duplicate now
    doc = json.loads(run("learn", "--store", path, "--json").output)
    assert doc["policy_version"] == 1 and doc["rebuild"] is None  # the same rules: no change


def test_duplicates_groups_fetches_by_the_rule_that_would_merge_them(tmp_path):
    with SeenStore.open(str(tmp_path / "s"), create=True, sync=False) as store:
        for n in range(3):
            store.record_fetch(f"http://d.test/p/{n}?ref=a", 200, body=page(n))
            store.record_fetch(f"http://d.test/p/{n}?ref=b", 200, body=page(n))
            store.record_fetch(f"http://d.test/Q/{n}", 200, body=page(100 + n))
            store.record_fetch(f"http://d.test/q/{n}", 200, body=page(100 + n))
            store.record_fetch(f"http://d.test/story_{n}", 200, body=page(200 + n))
            store.record_fetch(f"http://d.test/story?id={n}", 200, body=page(200 + n))
    r = run("duplicates", "--store", str(tmp_path / "s"), "--json")
    (host,) = json.loads(r.output)["hosts"]
    assert host["host"] == "d.test" and host["duplicates"] == 9
    assert host["by_rule"] == {"strip_params=ref": 3, "lowercase_path": 3,
                               "no rule explains it": 3}


def test_record_fetches_takes_dicts_or_an_arrow_table_and_rejects_bad_records(tmp_path):
    import pyarrow as pa

    from seenstore import page_digest, page_simhash
    from seenstore.store.learning import evidence

    with SeenStore.open(str(tmp_path / "s"), create=True, sync=False) as store:
        table = pa.table({"url": ["http://a.test/x", "http://a.test/y", "mailto:z"],
                          "status": [200, 301, 200],
                          "location": [None, "/x", None],
                          "body": [page(1), None, None]})
        got = store.record_fetches(table)
        assert got["recorded"] == 2 and [i for i, _ in got["rejected"]] == [2]
        got = store.record_fetches([{"url": "http://a.test/z", "status": 200, "nope": 1},
                                    "not a dict", {"url": "http://a.test/w", "status": 404}])
        assert got["recorded"] == 1 and [i for i, _ in got["rejected"]] == [0, 1]
        kept = {f.url: f for f in evidence(store)}
        assert kept["http://a.test/x"].digest == page_digest(page(1))
        assert kept["http://a.test/x"].simhash == page_simhash(page(1))
        assert kept["http://a.test/y"].location == "http://a.test/x"
