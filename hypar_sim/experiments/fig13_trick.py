"""Figure 13: HyPar vs "one weird trick" on VGG-E's conv5 (batch 32) and fc layers (batch 4096)."""

from __future__ import annotations

import json

import matplotlib.pyplot as plt
import pandas as pd

from hypar_sim.experiments.common import Figure, geomean, markdown_table, rows_frame
from hypar_sim.figure_style import PALETTE, SMALL
from hypar_sim.partition.kinds import paper_label
from hypar_sim.sweep import Case
from hypar_sim.workload.network import WORKLOADS_DIR

PARTS = {"conv5": (str(WORKLOADS_DIR / "parts" / "vgg_e_conv5.yaml"), 32),
         "fc3": (str(WORKLOADS_DIR / "parts" / "vgg_e_fc.yaml"), 4096)}
PAPER_UP_TO = 2.40  # abstract: "HyPar performs up to 2.40x better than one weird trick"


def compute(quick: bool = False, workers: int | None = None, cache: dict | None = None) -> pd.DataFrame:
    levels = (1, 2) if quick else (2, 3, 4)
    rows = []
    for part, (path, batch) in PARTS.items():
        for level in levels:
            runs = rows_frame([Case(path, s, "htree", 2**level, batch, traffic_model="paper")
                               for s in ("trick", "hypar")],
                              workers, cache).set_index("strategy")
            rows.append({
                "case": f"{part}-b{batch}-h{level}", "part": part, "batch": batch,
                "levels": level, "accelerators": 2**level,
                "trick_latency_s": runs.latency_s["trick"], "hypar_latency_s": runs.latency_s["hypar"],
                "trick_energy_j": runs.energy_j["trick"], "hypar_energy_j": runs.energy_j["hypar"],
                "trick_traffic_gb": runs.traffic_bytes["trick"] / 1e9,
                "hypar_traffic_gb": runs.traffic_bytes["hypar"] / 1e9,
                "hypar_plan": json.dumps([[paper_label(kind) for kind in level]  # dp/mp
                                          for level in json.loads(runs.plan["hypar"])],
                                         separators=(",", ":")),
            })
    table = pd.DataFrame(rows)
    table["performance_vs_trick"] = table.trick_latency_s / table.hypar_latency_s
    table["efficiency_vs_trick"] = table.trick_energy_j / table.hypar_energy_j
    mean = {"case": "geomean", "performance_vs_trick": geomean(table.performance_vs_trick),
            "efficiency_vs_trick": geomean(table.efficiency_vs_trick)}
    return pd.concat([table, pd.DataFrame([mean])], ignore_index=True)


def plot(table: pd.DataFrame):
    fig, ax = plt.subplots(figsize=(10, 4.2))
    width = 0.38
    positions = range(len(table))
    for k, (column, label, color) in enumerate((
            ("performance_vs_trick", "performance", PALETTE[2]),
            ("efficiency_vs_trick", "energy efficiency", PALETTE[4]))):
        bars = ax.bar([p + (k - 0.5) * width for p in positions], table[column], width,
                      label=label, color=color, edgecolor="black", linewidth=0.4)
        ax.bar_label(bars, fmt="%.2f", fontsize=SMALL)
    ax.axhline(1.0, color="black", linewidth=0.6)
    ax.set_xticks(list(positions), table.case)
    ax.set_ylabel("HyPar relative to one weird trick (x)")
    ax.set_title("Figure 13: HyPar vs one weird trick (conv dp, fc mp); VGG-E parts, H-tree")
    ax.legend()
    ax.grid(axis="y")
    return fig


def report(table: pd.DataFrame) -> str:
    body = table[table.case != "geomean"]
    best = body.loc[body.performance_vs_trick.idxmax()]
    shown = table[["case", "performance_vs_trick", "efficiency_vs_trick", "trick_traffic_gb",
                   "hypar_traffic_gb"]]
    return "\n".join([
        f"HyPar is up to **{body.performance_vs_trick.max():.2f}x** faster ({best.case}) and up to "
        f"**{body.efficiency_vs_trick.max():.2f}x** more energy efficient than the trick "
        f"(paper: up to {PAPER_UP_TO}x); never worse: "
        f"**{bool((body.performance_vs_trick >= 0.999).all())}**.",
        "",
        markdown_table(shown),
    ])


FIGURE = Figure("fig13_trick", __doc__.splitlines()[0], compute, plot, report)
main = FIGURE.main
