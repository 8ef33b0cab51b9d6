"""Figure 11: scalability of VGG-A from 1 to 64 accelerators, HyPar vs Data Parallelism."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from hypar_sim.experiments.common import (
    STRATEGY_COLORS,
    STRATEGY_LABELS,
    STRATEGY_MARKERS,
    Figure,
    markdown_table,
    rows_frame,
)
from hypar_sim.sweep import Case

STRATEGIES = ("data", "hypar")


def compute(quick: bool = False, workers: int | None = None, cache: dict | None = None) -> pd.DataFrame:
    network, counts = ("lenet_c", (1, 2, 4, 8)) if quick else ("vgg_a", (1, 2, 4, 8, 16, 32, 64))
    cases = [Case(network, s, "htree", n, 256) for s in STRATEGIES for n in counts]
    frame = rows_frame(cases, workers, cache)
    table = frame[["network", "strategy", "accelerators", "batch", "latency_s", "energy_j",
                   "traffic_bytes"]].copy()
    single = table[table.accelerators == 1].set_index("strategy").latency_s
    table["gain_vs_one"] = table.strategy.map(single) / table.latency_s
    table["traffic_gb"] = table.traffic_bytes / 1e9
    return table


def plot(table: pd.DataFrame):
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    counts = sorted(table.accelerators.unique())
    for strategy in STRATEGIES:
        part = table[table.strategy == strategy].sort_values("accelerators")
        style = {"color": STRATEGY_COLORS[strategy], "marker": STRATEGY_MARKERS[strategy],
                 "label": STRATEGY_LABELS[strategy]}
        left.plot(part.accelerators, part.gain_vs_one, **style)
        shown = part[part.accelerators > 1]
        right.plot(shown.accelerators, shown.traffic_gb, **style)
    left.plot(counts, counts, color="gray", linestyle=":", marker="", label="linear")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xticks(counts, [str(c) for c in counts])
        ax.set_xlabel("accelerators")
        ax.grid(which="both")
        ax.legend()
    left.set_yscale("log", base=2)
    left.set_ylabel("performance gain over one accelerator (x)")
    right.set_yscale("log")
    right.set_ylabel("communication per training step (GB, log scale)")
    name = "VGG-A" if table.network.iloc[0] == "vgg_a" else table.network.iloc[0]
    fig.suptitle(f"Figure 11: scalability of {name}, H-tree, batch 256")
    return fig


def report(table: pd.DataFrame) -> str:
    wide = table.pivot(index="accelerators", columns="strategy",
                       values=["gain_vs_one", "traffic_gb"])
    wide.columns = [f"{value} ({strategy})" for value, strategy in wide.columns]
    wide = wide.reset_index()
    top = table.accelerators.max()
    last = table[table.accelerators == top].set_index("strategy")
    best_data = table[table.strategy == "data"].loc[lambda f: f.gain_vs_one.idxmax()]
    return "\n".join([
        f"At {top} accelerators HyPar gains **{last.gain_vs_one['hypar']:.3g}x** over one "
        f"accelerator, Data Parallelism **{last.gain_vs_one['data']:.3g}x**; Data Parallelism "
        f"peaks at {int(best_data.accelerators)} accelerators ({best_data.gain_vs_one:.3g}x).",
        f"HyPar scales further than Data Parallelism: **"
        f"{bool(last.gain_vs_one['hypar'] > last.gain_vs_one['data'])}**; its traffic at {top} "
        f"accelerators is {last.traffic_gb['hypar']:.3g} GB against {last.traffic_gb['data']:.3g} GB.",
        "",
        markdown_table(wide),
    ])


FIGURE = Figure("fig11_scalability", __doc__.splitlines()[0], compute, plot, report)
main = FIGURE.main
