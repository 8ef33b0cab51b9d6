"""Figure 13: HyPar vs "one weird trick" on VGG-E's conv5 (batch 32) and fc layers (batch 4096).

Writes results/fig13_trick.csv and its .png; --quick for the reduced configuration.
"""

from hypar_sim.experiments.fig13_trick import main

if __name__ == "__main__":
    main()
