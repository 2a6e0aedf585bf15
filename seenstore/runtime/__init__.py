"""Mechanisms every stage shares and none owns: threads over a batch's chunks,
the ordered pipeline map, page-aligned buffers for O_DIRECT. No seenstore imports
beyond errors: everything may depend on this package.
"""
