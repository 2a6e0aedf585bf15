from seenstore.cli import main

main(prog_name="seenstore")
