"""Figure 10: VGG-A parallelism space: conv5_2 and fc1 over H1..H4 (others as HyPar).

Writes results/fig10_vgga_space.csv and its .png; --quick for the reduced configuration.
"""

from hypar_sim.experiments.fig10_vgga_space import main

if __name__ == "__main__":
    main()
