"""The Scrapy dupefilter's public name: ``DUPEFILTER_CLASS =
"seenstore.scrapy.SeenStoreDupeFilter"`` in a project's settings (the class lives in
integrations/scrapy.py; this module only names it, so settings stay short)."""

from seenstore.integrations.scrapy import SeenStoreDupeFilter

__all__ = ["SeenStoreDupeFilter"]
