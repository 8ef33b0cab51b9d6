"""Figure 7: energy efficiency of MP, DP and HyPar, normalized to DP.

Writes results/fig07_energy.csv and its .png; --quick for the reduced configuration.
"""

from hypar_sim.experiments.fig07_energy import main

if __name__ == "__main__":
    main()
