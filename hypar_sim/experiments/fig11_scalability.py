"""Figure 11: scalability of VGG-A from 1 to 64 accelerators, HyPar vs Data Parallelism.

Beyond the paper: the same from 64 to 1,024 accelerators at batch 1,024 (one sample an
accelerator at the top: batch 256 cannot be split over more than 256 by Data Parallelism,
nor VGG-A's three-channel first layer by HyPar's two kinds), as training throughput.
"""

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
#: The paper's batch, and the larger one the arrays beyond 256 accelerators need.
BATCH, LARGE_BATCH = 256, 1024
LARGE_COUNTS = (64, 128, 256, 512, 1024)


def compute(quick: bool = False, workers: int | None = None, cache: dict | None = None) -> pd.DataFrame:
    network, counts = ("lenet_c", (1, 2, 4, 8)) if quick else ("vgg_a", (1, 2, 4, 8, 16, 32, 64))
    cases = [Case(network, s, "htree", n, BATCH, traffic_model="paper") for s in STRATEGIES for n in counts]
    if not quick:
        cases += [Case(network, s, "htree", n, LARGE_BATCH, traffic_model="paper") for s in STRATEGIES
                  for n in LARGE_COUNTS]
    frame = rows_frame(cases, workers, cache)
    table = frame[["network", "strategy", "accelerators", "batch", "latency_s", "energy_j",
                   "traffic_bytes"]].copy()
    single = table[table.accelerators == 1].set_index("strategy").latency_s
    table["gain_vs_one"] = table.strategy.map(single) / table.latency_s  # NaN at batch 1024
    table["traffic_gb"] = table.traffic_bytes / 1e9
    table["samples_per_s"] = table.batch / table.latency_s
    return table


def plot(table: pd.DataFrame):
    large = table[table.batch == LARGE_BATCH]
    table = table[table.batch != LARGE_BATCH]
    fig, axes = plt.subplots(1, 3 if len(large) else 2, figsize=(18 if len(large) else 12, 4.5))
    left, right = axes[:2]
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
    if len(large):
        _plot_throughput(axes[2], large)
        fig.suptitle(f"Figure 11: scalability of {name}, H-tree, batch {BATCH} (left, middle; "
                     f"the paper's) and {LARGE_BATCH} (right; beyond the paper)")
    else:
        fig.suptitle(f"Figure 11: scalability of {name}, H-tree, batch {BATCH}")
    return fig


def _plot_throughput(ax, large: pd.DataFrame) -> None:
    """Samples per second against accelerators at batch 1,024, with linear scaling from the
    fewest accelerators for reference."""
    counts = sorted(large.accelerators.unique())
    for strategy in STRATEGIES:
        part = large[large.strategy == strategy].sort_values("accelerators")
        ax.plot(part.accelerators, part.samples_per_s, color=STRATEGY_COLORS[strategy],
                marker=STRATEGY_MARKERS[strategy], label=STRATEGY_LABELS[strategy])
    base = large[large.accelerators == counts[0]].samples_per_s.max()
    ax.plot(counts, [base * n / counts[0] for n in counts], color="gray", linestyle=":",
            marker="", label=f"linear from the best at {counts[0]}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log", base=2)
    ax.set_xticks(counts, [str(c) for c in counts])
    ax.set_xlabel("accelerators")
    ax.set_ylabel(f"training throughput (samples/s, batch {LARGE_BATCH})")
    ax.grid(which="both")
    ax.legend()


def report(table: pd.DataFrame) -> str:
    large = table[table.batch == LARGE_BATCH]
    table = table[table.batch != LARGE_BATCH]
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
    ] + (_report_large(large) if len(large) else []))


def _report_large(large: pd.DataFrame) -> list[str]:
    wide = large.pivot(index="accelerators", columns="strategy",
                       values=["samples_per_s", "traffic_gb"])
    wide.columns = [f"{value} ({strategy})" for value, strategy in wide.columns]
    rate = large.pivot(index="accelerators", columns="strategy", values="samples_per_s")
    low, top = rate.index.min(), rate.index.max()
    return [
        "",
        f"Beyond the paper, batch {LARGE_BATCH}: from {low} to {top} accelerators HyPar's "
        f"throughput goes from {rate.hypar[low]:.3g} to {rate.hypar[top]:.3g} samples/s "
        f"({rate.hypar[top] / rate.hypar[low]:.3g}x for {top // low}x the accelerators), "
        f"Data Parallelism's from {rate.data[low]:.3g} to {rate.data[top]:.3g} samples/s.",
        "",
        markdown_table(wide.reset_index()),
    ]


FIGURE = Figure("fig11_scalability", __doc__.splitlines()[0], compute, plot, report)
main = FIGURE.main
