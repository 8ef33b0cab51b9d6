"""Figure 9: Lenet-c parallelism space: all 16 x 16 choices at H1 and H4 (H2, H3 as HyPar).

Writes results/fig09_lenet_space.csv and its .png; --quick for the reduced configuration.
"""

from hypar_sim.experiments.fig09_lenet_space import main

if __name__ == "__main__":
    main()
