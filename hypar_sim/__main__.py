"""`python -m hypar_sim`: the command line."""

from hypar_sim.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
