"""Figure 10: VGG-A parallelism space: conv5_2 and fc1 over H1..H4 (others as HyPar)."""

from __future__ import annotations

import pandas as pd

from hypar_sim.experiments.common import Figure
from hypar_sim.experiments.space import explore, plot_space, report_space

ROW_LABEL = "conv5_2 at H1 H2 H3 H4"
COL_LABEL = "fc1 at H1 H2 H3 H4"


def compute(quick: bool = False, workers: int | None = None, cache: dict | None = None) -> pd.DataFrame:
    if quick:  # Cifar-c's conv3 and fc1 over the two levels of 4 accelerators
        return explore("cifar_c", 2, [(0, 2), (1, 2)], [(0, 3), (1, 3)], workers, cache, 4)
    conv5_2, fc1 = 7, 8  # positions in vgg_a.yaml
    return explore("vgg_a", 4, [(h, conv5_2) for h in range(4)], [(h, fc1) for h in range(4)],
                   workers, cache, 16)


def plot(table: pd.DataFrame):
    name = "VGG-A" if table.network.iloc[0] == "vgg_a" else table.network.iloc[0]
    acc = int(table.accelerators.iloc[0])
    return plot_space(table, f"Figure 10: {name}, {acc} accelerators, H-tree: performance of every "
               "choice for conv5_2 and fc1", ROW_LABEL, COL_LABEL)


def report(table: pd.DataFrame) -> str:
    return report_space(table, ROW_LABEL, COL_LABEL)


FIGURE = Figure("fig10_vgga_space", __doc__.splitlines()[0], compute, plot, report)
main = FIGURE.main
