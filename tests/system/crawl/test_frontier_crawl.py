"""A crawl that keeps its frontier in the store (issue 40): a ``DedupStage`` on a
store with values hands URLs out QUEUED, the crawler marks them IN_FLIGHT, then
DONE / FAILED (and trapped ones SKIPPED), the counts per state add up to the
distinct keys at every checkpoint, and a crawler killed with SIGKILL mid-crawl
resumes from the store alone (``requeue`` + ``select_urls(QUEUED)``): every
legitimate page fetched, traps bounded by the limit across the kill, and no URL
fetched twice except those in flight at the kill, which ``requeue`` hands out
again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter

from clirun import cli_bytes
from simweb.trapweb import TrapWeb

from seenstore.frontier.state import State
from seenstore.store import SeenStore

TESTS = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIMIT = 30  # above the ~25 months a calendar shows before it runs a year ahead
PRODUCTS = 400
GROUP = 16  # URLs marked IN_FLIGHT (then fetched) at a time

CRAWLER = r"""
import json, os, signal, sys
from collections import deque
sys.path.insert(0, {tests!r})
from simweb.trapweb import TrapWeb
from seenstore.frontier.state import State
from seenstore.stage import DedupStage

store_dir, log_path, kill_after = {store!r}, {log!r}, {kill_after!r}
web = TrapWeb(n_products={products})
log = open(log_path, "a")

def note(**rec):
    log.write(json.dumps(rec) + "\n"); log.flush()

stage = DedupStage.open(store_dir, create=True, values=True, traps={limit}, sync=False,
                        wal_sync="never")
queue = deque()

def take(res):
    queue.extend(u for _, u in res)
    if res.trapped:
        stage.mark([u for u, _ in res.trapped], State.SKIPPED)

if len(stage.store) == 0:
    take(stage.offer(web.seeds))
else:  # a restart: the frontier is the store's
    again = stage.requeue()
    note(requeued=list(again))
    queue.extend(stage.store.select_urls(State.QUEUED))
fetched = 0
while True:
    while queue:
        group = [queue.popleft() for _ in range(min({group}, len(queue)))]
        stage.mark(group, State.IN_FLIGHT)
        for i, url in enumerate(group):
            status, links, digest = web.respond(url)
            note(fetched=url)
            fetched += 1
            if kill_after is not None and fetched >= kill_after and i == len(group) // 2:
                os.kill(os.getpid(), signal.SIGKILL)
            if links:
                take(stage.offer(links))
            take(stage.flush())  # the links are offered durably before the page is done
            ok = status < 400
            stage.mark([url], State.DONE if ok else State.FAILED, status=status,
                       digest=digest or 0, fetched_at=1_700_000_000 + fetched)
        counts = stage.counts()
        note(counts={{s.name: n for s, n in counts.items()}}, keys=len(stage.store))
    res = stage.flush()
    if not len(res) and not res.trapped:
        break
    take(res)
note(end=True)
stage.close()
"""


def _run(store: str, log: str, kill_after: int | None) -> int:
    code = CRAWLER.format(tests=TESTS, store=store, log=log, kill_after=kill_after,
                          products=PRODUCTS, limit=LIMIT, group=GROUP)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(TESTS)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
                                    if p]))
    return subprocess.run([sys.executable, "-c", code], env=env, timeout=600).returncode


def test_a_crawl_killed_mid_way_resumes_from_the_store_state(tmp_path):
    store, log = str(tmp_path / "s"), str(tmp_path / "crawl.log")
    assert _run(store, log, kill_after=250) == -signal.SIGKILL
    assert _run(store, log, kill_after=None) == 0
    recs = [json.loads(line) for line in open(log)]
    fetched = [r["fetched"] for r in recs if "fetched" in r]
    requeued = next(r["requeued"] for r in recs if "requeued" in r)
    assert recs[-1] == {"end": True}
    assert requeued  # the kill fell inside a group marked IN_FLIGHT

    # nothing handed out twice, except what was in flight at the kill
    twice = {u for u, n in Counter(fetched).items() if n > 1}
    assert twice <= set(requeued) and max(Counter(fetched).values()) <= 2
    web = TrapWeb(n_products=PRODUCTS)
    assert {web.legit_page(u) for u in fetched} - {None} == web.legit()  # nothing lost
    per_trap = Counter(web.trap_of(u) for u in set(fetched))
    for trap in ("calendar", "repeat", "facets"):
        assert per_trap[trap] <= LIMIT, per_trap

    # the counts per state add up to the distinct keys at every checkpoint
    checkpoints = [r for r in recs if "counts" in r]
    assert len(checkpoints) > 10
    for c in checkpoints:
        assert sum(c["counts"].values()) == c["keys"]
        assert set(c["counts"]) == {s.name for s in State}

    with SeenStore.open(store, readonly=True) as s:
        counts = s.counts()
        assert sum(counts.values()) == len(s)
        assert counts[State.QUEUED] == 0 and counts[State.IN_FLIGHT] == 0
        done = set(s.select_urls(State.DONE))
        assert done == set(fetched) - set(s.select_urls(State.FAILED))
        assert counts[State.SKIPPED] > 0  # trapped URLs were marked
    out = cli_bytes("select", "--state", "IN_FLIGHT", "--store", store, "--json")
    assert json.loads(out.stdout)["count"] == 0
