"""``DUPEFILTER_CLASS = "seenstore.scrapy.SeenStoreDupeFilter"`` (integrations/scrapy.py)."""

from .integrations.scrapy import SeenStoreDupeFilter

__all__ = ["SeenStoreDupeFilter"]
