"""Parallelism-space exploration (Figures 9 and 10): simulate a 16 x 16 grid of plans.

Every plan of the grid is HyPar's plan with two groups of four choices
replaced: one group along the rows of the grid, the other along the columns.
Each group is four (layer, level) positions; its 16 assignments are the
4-bit patterns from dp dp dp dp to mp mp mp mp.
"""

from __future__ import annotations

import itertools

import matplotlib.pyplot as plt
import pandas as pd
from matplotlib import patheffects

from hypar_sim.experiments.common import PAPER_MODEL, markdown_table, rows_frame
from hypar_sim.figure_style import SMALL
from hypar_sim.partition.kinds import DP, MP, paper_label
from hypar_sim.planner.plan import make_plan
from hypar_sim.sweep import Case
from hypar_sim.workload.network import load_network


def pattern_label(pattern) -> str:
    return "".join("d" if c == DP else "m" for c in pattern)


def explore(network: str, levels: int, rows: list[tuple[int, int]], cols: list[tuple[int, int]],
            workers: int | None, cache: dict | None, accelerators: int) -> pd.DataFrame:
    """Simulate the grid; rows/cols are (level, layer) positions varied by the patterns."""
    net = load_network(network)
    hypar = [[paper_label(c) for c in level]
             for level in make_plan(net, "hypar", levels, 256, options=PAPER_MODEL).choices]
    size = 2 ** len(rows)
    patterns = [tuple(p) for p in itertools.product((DP, MP), repeat=len(rows))]
    grid_cases, meta = [], []
    for row_pattern in patterns[:size]:
        for col_pattern in patterns[:size]:
            plan = [list(level) for level in hypar]
            for (level, layer), choice in zip(rows, row_pattern, strict=True):
                plan[level][layer] = choice
            for (level, layer), choice in zip(cols, col_pattern, strict=True):
                plan[level][layer] = choice
            text = "; ".join(" ".join(level) for level in plan)
            grid_cases.append(Case(network, "explicit", "htree", accelerators, 256,
                                   plan_text=text, traffic_model="paper"))
            meta.append({"row": pattern_label(row_pattern), "col": pattern_label(col_pattern),
                         "is_hypar": plan == hypar, "plan_text": text})
    frame = rows_frame(grid_cases, workers, cache)
    data_case = Case(network, "data", "htree", accelerators, 256, traffic_model="paper")
    data = rows_frame([data_case], workers, cache).iloc[0]
    table = pd.DataFrame(meta)
    table["network"] = network
    table["accelerators"] = accelerators
    table["latency_s"] = frame.latency_s.to_numpy()
    table["energy_j"] = frame.energy_j.to_numpy()
    table["traffic_bytes"] = frame.traffic_bytes.to_numpy()
    table["speedup_vs_data"] = data.latency_s / table.latency_s
    table["relative_to_best"] = table.latency_s.min() / table.latency_s
    return table


def plot_space(table: pd.DataFrame, title: str, row_label: str, col_label: str):
    rows = list(dict.fromkeys(table.row))
    cols = list(dict.fromkeys(table.col))
    values = table.pivot(index="row", columns="col", values="speedup_vs_data").loc[rows, cols]
    fig, ax = plt.subplots(figsize=(9, 7.5))
    image = ax.imshow(values.to_numpy(), cmap="viridis", aspect="auto")
    fig.colorbar(image, ax=ax, label="performance relative to Data Parallelism (x)")
    best = table.loc[table.latency_s.idxmin()]
    hypar = table[table.is_hypar].iloc[0]
    # Black marks in a white halo: seen on any cell of the map and in the (white) legend.
    halo = [patheffects.withStroke(linewidth=3.5, foreground="white")]
    ax.scatter([cols.index(best.col)], [rows.index(best.row)], marker="*", s=260, color="red",
               edgecolor="black", linewidth=0.8, path_effects=halo,
               label=f"peak ({best.speedup_vs_data:.3g}x)")
    ax.scatter([cols.index(hypar.col)], [rows.index(hypar.row)], marker="o", s=140,
               facecolor="none", edgecolor="black", linewidth=2, path_effects=halo,
               label=f"HyPar's plan ({hypar.speedup_vs_data:.3g}x)")
    ax.set_xticks(range(len(cols)), cols, rotation=90, fontsize=SMALL)
    ax.set_yticks(range(len(rows)), rows, fontsize=SMALL)
    ax.set_xlabel(col_label)
    ax.set_ylabel(row_label)
    ax.set_title(title)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    return fig


def report_space(table: pd.DataFrame, row_label: str, col_label: str) -> str:
    best = table.loc[table.latency_s.idxmin()]
    hypar = table[table.is_hypar].iloc[0]
    rank = int((table.latency_s < hypar.latency_s).sum()) + 1
    least_traffic = table.loc[table.traffic_bytes.idxmin()]
    top = table.nsmallest(5, "latency_s")[["row", "col", "speedup_vs_data", "traffic_bytes",
                                          "is_hypar"]]
    return "\n".join([
        f"{len(table)} plans simulated ({row_label} x {col_label}; d = dp, m = mp).",
        f"Peak: rows {best.row}, columns {best.col}, **{best.speedup_vs_data:.3g}x** Data "
        f"Parallelism. HyPar's plan (rows {hypar.row}, columns {hypar.col}): "
        f"**{hypar.speedup_vs_data:.3g}x**, {100 * hypar.relative_to_best:.1f}% of the peak, "
        f"rank {rank} of {len(table)}.",
        f"HyPar's plan has the least traffic of the grid: "
        f"**{bool(hypar.traffic_bytes <= least_traffic.traffic_bytes)}** "
        f"({hypar.traffic_bytes / 1e9:.4g} GB vs the minimum {least_traffic.traffic_bytes / 1e9:.4g} GB).",
        "",
        "The five fastest plans:",
        "",
        markdown_table(top),
    ])
