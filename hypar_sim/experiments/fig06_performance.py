"""Figure 6: training-step performance of MP, DP and HyPar, normalized to DP."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from hypar_sim.experiments import main_runs
from hypar_sim.experiments.common import (
    STRATEGY_COLORS,
    STRATEGY_LABELS,
    Figure,
    display,
    grouped_bars,
    markdown_table,
)

PAPER_HYPAR_SPEEDUP = 3.39  # abstract: HyPar vs Data Parallelism, geometric mean


def plot_normalized(table: pd.DataFrame, column: str, ylabel: str, title: str):
    groups = list(dict.fromkeys(table.network))
    fig, ax = plt.subplots(figsize=(12, 4.5))
    grouped_bars(ax, table, groups, main_runs.STRATEGIES, column, "network", "strategy",
                 STRATEGY_LABELS, STRATEGY_COLORS)
    ax.set_yscale("log")
    ax.axhline(1.0, color="black", linewidth=0.6)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    ax.grid(axis="y", which="both")
    return fig


def plot(table: pd.DataFrame):
    acc = int(table.accelerators.iloc[0])
    return plot_normalized(table, "speedup_vs_data",
                    "performance relative to Data Parallelism (x, log scale)",
                    f"Figure 6: training-step performance, {acc} accelerators, H-tree, batch 256 "
                    "(higher is better)")


def summary_table(table: pd.DataFrame, column: str) -> pd.DataFrame:
    wide = table.pivot(index="network", columns="strategy", values=column)
    order = list(dict.fromkeys(table.network))
    wide = wide.loc[order, list(main_runs.STRATEGIES)].reset_index()
    wide["network"] = wide.network.map(display)
    return wide


def report(table: pd.DataFrame) -> str:
    mean = table[table.network == "geomean"].set_index("strategy").speedup_vs_data
    body = table[table.network != "geomean"]
    hypar = body[body.strategy == "hypar"].set_index("network").speedup_vs_data
    model = body[body.strategy == "model"].set_index("network").speedup_vs_data
    never_worse = bool((hypar >= 0.999).all())
    model_worst = [display(n) for n in model.index
                   if model[n] < min(1.0, hypar[n]) + 1e-12]
    return "\n".join([
        f"HyPar's geometric-mean speedup over Data Parallelism is **{mean['hypar']:.2f}x** "
        f"(paper: {PAPER_HYPAR_SPEEDUP}x); Model Parallelism's is {mean['model']:.3g}x.",
        f"HyPar is never slower than Data Parallelism: **{never_worse}** "
        f"(lowest {hypar.min():.3g}x on {display(hypar.idxmin())}, highest "
        f"{hypar.max():.3g}x on {display(hypar.idxmax())}).",
        f"Model Parallelism is the slowest strategy on {len(model_worst)} of {len(model)} networks "
        f"({', '.join(model_worst)}).",
        "",
        markdown_table(summary_table(table, "speedup_vs_data")),
    ])


FIGURE = Figure("fig06_performance", __doc__.splitlines()[0], main_runs.compute, plot, report)
main = FIGURE.main
