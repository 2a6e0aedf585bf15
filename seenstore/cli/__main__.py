"""``python -m seenstore.cli``: the same command line as the ``seenstore`` script."""

from seenstore.cli import main

main(prog_name="seenstore")
