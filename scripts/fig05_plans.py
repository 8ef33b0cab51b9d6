"""Figure 5: the plans HyPar chooses, levels x layers of dp/mp, for the ten networks.

Writes results/fig05_plans.csv and its .png; --quick for the reduced configuration.
"""

from hypar_sim.experiments.fig05_plans import main

if __name__ == "__main__":
    main()
