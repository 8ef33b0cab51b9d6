"""Figure 9: Lenet-c parallelism space: all 16 x 16 choices at H1 and H4 (H2, H3 as HyPar)."""

from __future__ import annotations

import pandas as pd

from hypar_sim.experiments.common import Figure
from hypar_sim.experiments.space import explore, plot_space, report_space

ROW_LABEL = "choices at H1 (conv1 conv2 fc1 fc2)"
COL_LABEL = "choices at H4 (conv1 conv2 fc1 fc2)"


def compute(quick: bool = False, workers: int | None = None, cache: dict | None = None) -> pd.DataFrame:
    if quick:  # 4 accelerators: the two levels are H1 and H2
        return explore("lenet_c", 2, [(0, i) for i in range(4)], [(1, i) for i in range(4)],
                       workers, cache, 4)
    return explore("lenet_c", 4, [(0, i) for i in range(4)], [(3, i) for i in range(4)],
                   workers, cache, 16)


def plot(table: pd.DataFrame):
    acc = int(table.accelerators.iloc[0])
    last = "H4" if acc == 16 else "H2"
    return plot_space(table, f"Figure 9: Lenet-c, {acc} accelerators, H-tree: performance of every "
               f"choice at H1 and {last}", ROW_LABEL, COL_LABEL.replace("H4", last))


def report(table: pd.DataFrame) -> str:
    return report_space(table, ROW_LABEL, COL_LABEL)


FIGURE = Figure("fig09_lenet_space", __doc__.splitlines()[0], compute, plot, report)
main = FIGURE.main
