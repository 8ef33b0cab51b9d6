"""The paper's headline results (the abstract's means, Figure 11's data-parallel gains,
Figure 12's H-tree vs torus) under each reading its text leaves open: gradient overlap, mapper
objective, vaults per cube one at a time, and no overlap with the torus at equal total bandwidth.

Writes results/readings.csv and its figure; --quick for the reduced configuration.
"""

from hypar_sim.experiments.readings import main

if __name__ == "__main__":
    main()
