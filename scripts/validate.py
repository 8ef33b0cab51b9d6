"""The model beside every published number it can be checked against (the HyPar abstract's
means, Figure 8, the plans of section 6.2.1), with ratios.

Reads the figure tables under results/ and writes results/validation.md.
"""

from hypar_sim.experiments.validation import main

if __name__ == "__main__":
    main()
