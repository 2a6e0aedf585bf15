from . import main

main(prog_name="seenstore")
