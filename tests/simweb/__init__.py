"""A simulated web for measuring duplicate fetches (issue 38).

``web.py`` owns the hosts, what each answers and the ground truth (which distinct
page a URL serves, which pages are reachable); ``server.py`` serves it over real
HTTP/1.1 on 127.0.0.1 by the Host header; ``crawl.py`` is a crawler loop that
fetches it through a ``DedupStage`` and scores the crawl against the ground truth.
Used by ``tests/system/crawl/test_dust.py`` and ``bench/dust.py``.
``trapweb.py`` is a web of crawler traps beside a catalogue, answered in process
(issue 40), used by ``tests/system/crawl/test_trap_crawl.py``.
"""
