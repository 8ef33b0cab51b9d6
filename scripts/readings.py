"""The abstract's means under each reading the paper leaves open (overlap, mapper objective,
vaults per cube), one change at a time.

Writes results/readings.csv and its figure; --quick for the reduced configuration.
"""

from hypar_sim.experiments.readings import main

if __name__ == "__main__":
    main()
