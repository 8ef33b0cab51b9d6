"""Figure 6: training-step performance of MP, DP and HyPar, normalized to DP.

Writes results/fig06_performance.csv and its .png; --quick for the reduced configuration.
"""

from hypar_sim.experiments.fig06_performance import main

if __name__ == "__main__":
    main()
