"""Moved to seenstore/bloom/layers.py; kept so old imports work."""

from .bloom.layers import GROWTH, MAX_LAYERS, RATIO, LayeredBloom, layer_path  # noqa: F401
