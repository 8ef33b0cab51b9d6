"""Figure 12: H-tree vs torus for HyPar's plans, performance normalized to Data Parallelism.

Writes results/fig12_topology.csv and its .png; --quick for the reduced configuration.
"""

from hypar_sim.experiments.fig12_topology import main

if __name__ == "__main__":
    main()
