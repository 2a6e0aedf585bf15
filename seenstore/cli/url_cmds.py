"""Command family registered on seenstore.cli.main (filled in by its issue)."""
