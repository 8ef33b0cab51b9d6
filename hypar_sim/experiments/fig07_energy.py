"""Figure 7: energy efficiency of MP, DP and HyPar, normalized to DP."""

from __future__ import annotations

import pandas as pd

from hypar_sim.experiments import main_runs
from hypar_sim.experiments.common import Figure, display, markdown_table
from hypar_sim.experiments.fig06_performance import plot_normalized, summary_table

PAPER_HYPAR_EFFICIENCY = 1.51  # abstract: HyPar vs Data Parallelism, geometric mean


def plot(table: pd.DataFrame):
    acc = int(table.accelerators.iloc[0])
    return plot_normalized(table, "efficiency_vs_data",
                    "energy efficiency relative to Data Parallelism (x, log scale)",
                    f"Figure 7: energy efficiency of a training step, {acc} accelerators, H-tree "
                    "(higher is better)")


def report(table: pd.DataFrame) -> str:
    mean = table[table.network == "geomean"].set_index("strategy").efficiency_vs_data
    body = table[table.network != "geomean"]
    hypar = body[body.strategy == "hypar"].set_index("network").efficiency_vs_data
    return "\n".join([
        f"HyPar's geometric-mean energy efficiency over Data Parallelism is "
        f"**{mean['hypar']:.2f}x** (paper: {PAPER_HYPAR_EFFICIENCY}x); Model Parallelism's is "
        f"{mean['model']:.3g}x.",
        f"HyPar is at least as efficient as Data Parallelism on "
        f"{int((hypar >= 0.999).sum())} of {len(hypar)} networks (range {hypar.min():.3g}x on "
        f"{display(hypar.idxmin())} to {hypar.max():.3g}x on {display(hypar.idxmax())}).",
        "",
        markdown_table(summary_table(table, "efficiency_vs_data")),
    ])


FIGURE = Figure("fig07_energy", __doc__.splitlines()[0], main_runs.compute, plot, report)
main = FIGURE.main
