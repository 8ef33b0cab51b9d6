"""Both traffic models, and the joint search with more split kinds, on the ten networks."""

from hypar_sim.experiments.partition_kinds import main

if __name__ == "__main__":
    main()
