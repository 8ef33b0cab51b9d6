"""Figure 5: the plans HyPar chooses, levels x layers of dp/mp, for the ten networks."""

from __future__ import annotations

import math

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.colors import ListedColormap

from hypar_sim.experiments.common import PAPER_MODEL, QUICK_NETWORKS, Figure, display
from hypar_sim.figure_style import SMALL, TINY
from hypar_sim.paper import PAPER_NETWORKS
from hypar_sim.partition.kinds import DP, MP, paper_label
from hypar_sim.planner.plan import make_plan
from hypar_sim.workload.network import load_network

#: Section 6.2.1 of the paper, as checks on the plans: (network, description, test).
CLAIMS = (
    ("sfc", "SFC: mp everywhere except fc1 at H3, which is dp",
     lambda g: g[2][0] == DP and sum(c == DP for row in g for c in row) == 1),
    ("sconv", "SCONV: dp everywhere", lambda g: all(c == DP for row in g for c in row)),
    ("lenet_c", "Lenet-c: H1 and H4 are (dp, dp, mp, mp)",
     lambda g: g[0] == g[3] == [DP, DP, MP, MP]),
    ("vgg_a", "VGG-A: conv5_2 over H1..H4 is (dp, dp, dp, mp); fc1 is mp at all four levels",
     lambda g: [row[7] for row in g] == [DP, DP, DP, MP] and
     all(row[8] == MP for row in g)),
)


def compute(quick: bool = False, workers: int | None = None, cache: dict | None = None) -> pd.DataFrame:
    networks = QUICK_NETWORKS if quick else PAPER_NETWORKS
    levels = 2 if quick else 4
    rows = []
    for name in networks:
        net = load_network(name)
        plan = make_plan(net, "hypar", levels, 256, options=PAPER_MODEL)
        for level, choices in enumerate(plan.choices):
            for layer, choice in zip(net.layers, choices, strict=True):
                rows.append({"network": name, "level": f"H{level + 1}", "layer": layer.name,
                             "kind": layer.kind.value, "choice": paper_label(choice)})
    return pd.DataFrame(rows)


def grids(table: pd.DataFrame) -> dict[str, list[list[str]]]:
    result = {}
    for name, part in table.groupby("network", sort=False):
        levels = list(dict.fromkeys(part.level))
        result[name] = [list(part[part.level == level].choice) for level in levels]
    return result


def mostly(table: pd.DataFrame) -> tuple[float, float]:
    """(share of conv layers' choices that are dp, share of fc layers' that are mp)."""
    conv = table[table.kind == "conv"]
    fc = table[table.kind == "fc"]
    return float((conv.choice == DP).mean()), float((fc.choice == MP).mean())


def plot(table: pd.DataFrame):
    plans = grids(table)
    cols = 2
    rows = math.ceil(len(plans) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(13, 1.35 * rows + 0.8), squeeze=False)
    cmap = ListedColormap(["#c6dbef", "#e6550d"])  # dp light blue, mp orange: apart in grey
    for ax, (name, grid) in zip(axes.flat, plans.items(), strict=False):
        layers = list(table[(table.network == name) & (table.level == "H1")].layer)
        values = [[0 if c == DP else 1 for c in row] for row in grid]
        ax.imshow(values, cmap=cmap, vmin=0, vmax=1, aspect="auto")
        for i, row in enumerate(grid):
            for j, choice in enumerate(row):
                ax.text(j, i, choice, ha="center", va="center", fontsize=TINY)
        ax.set_yticks(range(len(grid)), [f"H{i + 1}" for i in range(len(grid))], fontsize=SMALL)
        ax.set_xticks(range(len(layers)), layers, fontsize=TINY, rotation=60)
        ax.set_title(display(name))
    for ax in list(axes.flat)[len(plans):]:
        ax.axis("off")
    fig.suptitle("Figure 5: HyPar's parallelism per layer (columns) and hierarchy level (rows); "
                 "blue dp, orange mp")
    return fig


def report(table: pd.DataFrame) -> str:
    plans = grids(table)
    lines = []
    for name, text, test in CLAIMS:
        if name in plans and len(plans[name]) == 4:
            lines.append(f"- {text}: **{'reproduced' if test(plans[name]) else 'NOT reproduced'}**")
    conv_dp, fc_mp = mostly(table)
    lines.append(f"- Conv layers mostly dp, fc layers mostly mp: {100 * conv_dp:.0f}% "
                 f"of conv choices are dp, {100 * fc_mp:.0f}% of fc choices are mp.")
    hybrid = [display(n) for n, g in plans.items() if len({c for row in g for c in row}) == 2]
    lines.append(f"- Hybrid (both dp and mp) in {len(hybrid)} of {len(plans)} networks: "
                 f"{', '.join(hybrid)}.")
    return "\n".join(lines)


FIGURE = Figure("fig05_plans", __doc__.splitlines()[0], compute, plot, report)
main = FIGURE.main
