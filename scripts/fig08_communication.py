"""Figure 8: total communication per training step, ours next to the paper's (results/)."""

from hypar_sim.experiments.fig08_communication import main

if __name__ == "__main__":
    main()
