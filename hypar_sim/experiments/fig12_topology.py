"""Figure 12: H-tree vs torus for HyPar's plans, performance normalized to Data Parallelism."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from hypar_sim.experiments.common import (
    QUICK_NETWORKS,
    Figure,
    cases,
    display,
    geomean,
    grouped_bars,
    markdown_table,
    rows_frame,
)
from hypar_sim.figure_style import HATCHES, PALETTE
from hypar_sim.paper import PAPER_NETWORKS
from hypar_sim.sweep import Case

SERIES = ("data/htree", "data/torus", "hypar/htree", "hypar/torus", "hypar/torus-equal-total")
LABELS = {"data/htree": "Data Parallelism, H-tree", "data/torus": "Data Parallelism, torus",
          "hypar/htree": "HyPar, H-tree", "hypar/torus": "HyPar, torus",
          "hypar/torus-equal-total": "HyPar, torus at the H-tree's total link bandwidth"}
COLORS = dict(zip(SERIES, PALETTE, strict=True))  # apart in grey
TORUS_HATCHES = {"data/torus": HATCHES[0], "hypar/torus": HATCHES[0],
                 "hypar/torus-equal-total": HATCHES[1]}


def compute(quick: bool = False, workers: int | None = None, cache: dict | None = None) -> pd.DataFrame:
    networks = QUICK_NETWORKS if quick else PAPER_NETWORKS
    accelerators = 4 if quick else 16
    frame = pd.concat([rows_frame(cases(networks, ("data", "hypar"), topology, accelerators),
                                  workers, cache) for topology in ("htree", "torus")])
    equal = (("torus_bandwidth", "total"),)  # the H-tree's total shared by the torus's links
    scaled = rows_frame([Case(n, "hypar", "torus", accelerators, 256, overrides=equal,
                                     traffic_model="paper")
                         for n in networks], workers, cache)
    frame = pd.concat([frame, scaled.assign(topology="torus-equal-total")])
    table = frame[["network", "strategy", "topology", "accelerators", "latency_s", "energy_j",
                   "traffic_bytes"]].copy()
    table["series"] = table.strategy + "/" + table.topology
    base = table[table.series == "data/htree"].set_index("network").latency_s
    same = table[table.strategy == "data"].set_index(["network", "topology"]).latency_s
    table["speedup_vs_data_htree"] = table.network.map(base) / table.latency_s
    table["speedup_vs_data_same_topology"] = [
        same.get((n, t), float("nan")) / lat
        for n, t, lat in zip(table.network, table.topology, table.latency_s, strict=True)]
    means = [{"network": "geomean", "series": s, "accelerators": accelerators,
              "speedup_vs_data_htree": geomean(table[table.series == s].speedup_vs_data_htree),
              "speedup_vs_data_same_topology":
                  geomean(table[table.series == s].speedup_vs_data_same_topology)}
             for s in SERIES]
    return pd.concat([table, pd.DataFrame(means)], ignore_index=True)


def plot(table: pd.DataFrame):
    groups = list(dict.fromkeys(table.network))
    fig, ax = plt.subplots(figsize=(12, 4.5))
    grouped_bars(ax, table, groups, SERIES, "speedup_vs_data_htree", "network", "series",
                 LABELS, COLORS, TORUS_HATCHES)
    ax.set_yscale("log")
    ax.axhline(1.0, color="black", linewidth=0.6)
    ax.set_ylabel("performance relative to Data Parallelism on the H-tree (x, log)")
    acc = int(table.accelerators.iloc[0])
    ax.set_title(f"Figure 12: H-tree vs 2-D torus, {acc} accelerators, batch 256 (higher is better)")
    ax.legend(ncol=2)
    ax.grid(axis="y", which="both")
    return fig


#: Steps within this fraction of each other tie (neither topology is faster).
TIE = 0.0005


def htree_faster(torus_over_htree):
    """Where HyPar's step on the torus takes longer than on the H-tree by more than a tie
    (ratios of torus time to H-tree time; a number or an array)."""
    return torus_over_htree > 1 + TIE


def report(table: pd.DataFrame) -> str:
    body = table[table.network != "geomean"]
    hypar = body[body.strategy == "hypar"].pivot(index="network", columns="topology",
                                                 values="latency_s")
    ratio = hypar.torus / hypar.htree
    equal = hypar["torus-equal-total"] / hypar.htree
    faster = [display(n) for n in ratio.index if htree_faster(ratio[n])]
    slower = [display(n) for n in ratio.index if ratio[n] < 1 - TIE]
    wide = table.pivot(index="network", columns="series", values="speedup_vs_data_htree")
    wide = wide.loc[list(dict.fromkeys(table.network)), list(SERIES)].reset_index()
    wide["network"] = wide.network.map(display)
    return "\n".join([
        f"HyPar's step on the torus takes {geomean(ratio):.3f}x its time on the H-tree "
        f"(geometric mean; range {ratio.min():.3f}x to {ratio.max():.3f}x).",
        f"The H-tree is faster for HyPar's plan on {len(faster)} of {len(ratio)} networks "
        f"({', '.join(faster) or 'none'}); the torus on {len(slower)} "
        f"({', '.join(slower) or 'none'}); the rest tie within {TIE:.2%}. With every torus link at "
        f"the same per-link bandwidth as the H-tree's base link, the torus has twice the links "
        f"and four ports per accelerator.",
        f"At the H-tree's total link bandwidth (torus links slowed to match), HyPar's step on the "
        f"torus takes **{geomean(equal):.3f}x** its H-tree time (range {equal.min():.3f}x to "
        f"{equal.max():.3f}x); the H-tree is faster on "
        f"{int(htree_faster(equal).sum())} of {len(equal)} networks.",
        "",
        "Performance relative to Data Parallelism on the H-tree:",
        "",
        markdown_table(wide),
    ])


FIGURE = Figure("fig12_topology", __doc__.splitlines()[0], compute, plot, report)
main = FIGURE.main
