"""Adapters to the tools crawlers already use (docs/integrations.md).

Each module needs its own optional extra and is imported only when used:
``scrapy`` (``[scrapy]``: the dupefilter), ``warc`` (``[warc]``: outlinks of WARC
files), ``arrow`` (``[arrow]``: Arrow arrays and Parquet columns into the fast path).
"""
