"""The asyncio embedding example (examples/asyncio_stage.py) against a plain BFS of its web."""

import importlib.util
import os

from seenstore.url.normalise import normalise
from conftest import REPO

spec = importlib.util.spec_from_file_location(
    "asyncio_stage", os.path.join(REPO, "examples", "asyncio_stage.py"))
example = importlib.util.module_from_spec(spec)
spec.loader.exec_module(example)


def reachable_pages():
    """Canonical URLs of the non-trap pages reachable from START (set-based BFS)."""
    seen, todo = {example.START}, [example.START]
    while todo:
        url = todo.pop()
        for link in example.links_of(url):
            u = normalise(link, base=url)
            if u not in seen and u.split("/")[2] != example.TRAP:
                seen.add(u)
                todo.append(u)
    return seen


def test_example_crawls_every_page_once_and_caps_the_trap(tmp_path):
    store = str(tmp_path / "crawl.db")
    first = example.run(store, workers=8, host_cap=320)
    pages = reachable_pages()
    per_host = first["pages_per_host"]
    assert first["duplicate_fetches"] == 0
    # an endless trap, bounded by the cap (300 pages a host)
    assert per_host.pop(example.TRAP) == 320
    assert sum(per_host.values()) == len(pages)
    assert first["fetched"] == len(pages) + 320
    assert first["refused_by_cap"] > 0 and first["merges"] > 0
    again = example.run(store, workers=8, host_cap=320)
    assert again["fetched"] == 0  # the same store: nothing is handed out twice
