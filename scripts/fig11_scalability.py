"""Figure 11: scalability of VGG-A from 1 to 64 accelerators, HyPar vs Data Parallelism.

Writes results/fig11_scalability.csv and its .png; --quick for the reduced configuration.
"""

from hypar_sim.experiments.fig11_scalability import main

if __name__ == "__main__":
    main()
