"""What a crawl frontier knows beyond "seen": trap shapes (``traps.py``: URL spaces
that generate without limit, recognised per host by the shape of their URLs and
bounded) and host health (``hosts.py``: per host, what the store holds). The stage
uses ``TrapGuard`` when opened with ``traps=``; ``seenstore hosts`` prints
``host_report``. ``state.py``: ``State``, the crawl state a store with values keeps
per key (store/values.py). docs/frontier.md.
"""

from seenstore.frontier.traps import Trap, TrapGuard, template

__all__ = ["Trap", "TrapGuard", "template"]
