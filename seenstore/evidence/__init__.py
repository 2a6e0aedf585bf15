"""Evidence from fetches: what a server's answers reveal about which URLs are one page.

``digest`` fingerprints bodies (exact digest, SimHash), ``extract`` reads declared
canonicals, ``record`` builds a ``Fetch`` record, ``learn`` turns records into per-host
rules (docs/evidence.md). Imports only ``seenstore.errors`` and ``seenstore.url``.
"""
