"""The HyPar paper's evaluation, one module per figure (see results/README.md).

Each module has `compute(quick, workers, cache) -> DataFrame`, `plot(table) -> matplotlib
figure` (drawn in `hypar_sim.figure_style` and saved by `Figure.run` as PNG and PDF),
`report(table) -> markdown` and `main(argv)`; `scripts/figNN_*.py` call `main`.
`quick` runs a reduced configuration (4 accelerators, small networks) for tests.
"""

FIGURES = ("fig05_plans", "fig06_performance", "fig07_energy", "fig08_communication",
           "fig09_lenet_space", "fig10_vgga_space", "fig11_scalability", "fig12_topology",
           "fig13_trick", "partition_kinds", "readings")
