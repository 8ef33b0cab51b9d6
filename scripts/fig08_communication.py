"""Figure 8: total communication per training step, ours next to the paper's.

16 accelerators (4 levels), batch 256, fp32. The AlexNet row uses
`alexnet_half` (single tower, half width, 16.6M weights): the paper's AlexNet
traffic (Data Parallelism 2.00 GB = 120 bytes x weights) implies 16.6M
weights, and the standard 62.4M-weight AlexNet would give 7.48 GB.

Writes results/fig08_communication.csv and results/fig08_communication.png.
"""

from __future__ import annotations

import argparse
import io
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from hypar_sim.atomic import atomic_write, atomic_write_text  # noqa: E402
from hypar_sim.paper import (  # noqa: E402
    DISPLAY_NAMES,
    FIGURE_8_GB,
    FIGURE_8_STRATEGIES,
    PAPER_NETWORKS,
    VGG_B_HYPAR_GB_CONSISTENT,
)
from hypar_sim.planner.strategies import make_plan  # noqa: E402
from hypar_sim.workload.network import load_network  # noqa: E402

LABELS = {"model": "Model Parallelism", "data": "Data Parallelism", "hypar": "HyPar"}
COLORS = {"model": "#d62728", "data": "#1f77b4", "hypar": "#2ca02c"}


def note_for(network: str, strategy: str) -> str:
    if strategy == "model":
        return "paper's MP column not reproduced by any consistent reading"
    if network == "vgg_b" and strategy == "hypar":
        return f"printed 1.47 is a misprint: VGG-B adds traffic to VGG-A; ~{VGG_B_HYPAR_GB_CONSISTENT}"
    if network == "alexnet_half":
        return "single-tower half-width AlexNet reproduces the paper's AlexNet"
    return ""


def communication_table(networks=PAPER_NETWORKS, levels: int = 4, batch: int = 256) -> pd.DataFrame:
    rows = []
    for name in networks:
        net = load_network(name)
        for strategy, paper_gb in zip(FIGURE_8_STRATEGIES, FIGURE_8_GB[name], strict=True):
            plan = make_plan(net, strategy, levels, batch)
            ours = plan.traffic_bytes / 1e9
            compare = levels == 4 and batch == 256
            rows.append({
                "network": name, "display_name": DISPLAY_NAMES[name], "strategy": strategy,
                "accelerators": plan.accelerators, "batch": batch,
                "ours_gb": ours, "paper_gb": paper_gb if compare else math.nan,
                "ratio": ours / paper_gb if compare else math.nan,
                "note": note_for(name, strategy),
            })
    table = pd.DataFrame(rows)
    geo = []
    for strategy in FIGURE_8_STRATEGIES:
        part = table[table.strategy == strategy]
        ours = math.exp(sum(map(math.log, part.ours_gb)) / len(part))
        paper = math.exp(sum(map(math.log, part.paper_gb)) / len(part))
        geo.append({"network": "geomean", "display_name": "Gmean", "strategy": strategy,
                    "accelerators": 2**levels, "batch": batch, "ours_gb": ours, "paper_gb": paper,
                    "ratio": ours / paper, "note": "geometric mean over the networks above"})
    return pd.concat([table, pd.DataFrame(geo)], ignore_index=True)


def plot(table: pd.DataFrame, path: Path) -> None:
    names = list(dict.fromkeys(table.display_name))
    fig, ax = plt.subplots(figsize=(12, 4.8))
    width = 0.13
    for s, strategy in enumerate(FIGURE_8_STRATEGIES):
        part = table[table.strategy == strategy].set_index("display_name").loc[names]
        for k, (column, style) in enumerate((("ours_gb", {}), ("paper_gb", {"hatch": "//",
                                                                            "alpha": 0.45}))):
            offset = (2 * s + k - 2.5) * width
            ax.bar([i + offset for i in range(len(names))], part[column], width,
                   color=COLORS[strategy], edgecolor="black", linewidth=0.4,
                   label=f"{LABELS[strategy]} ({'ours' if k == 0 else 'paper'})", **style)
    ax.set_yscale("log")
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("communication per training step (GB, log scale)")
    ax.set_title("Figure 8: total communication, 16 accelerators, batch 256 "
                 "(solid: hypar-sim, hatched: HyPar paper)")
    ax.legend(ncol=3, fontsize=8, loc="upper left")
    ax.grid(axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=120)
    plt.close(fig)
    atomic_write(path, lambda handle: handle.write(buffer.getvalue()))


def main(argv=None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("results"), help="output folder")
    args = parser.parse_args(argv)
    table = communication_table()
    atomic_write_text(args.out / "fig08_communication.csv", table.to_csv(index=False))
    plot(table, args.out / "fig08_communication.png")
    shown = table.assign(ours_gb=table.ours_gb.map("{:.4g}".format),
                         ratio=table.ratio.map("{:.3f}".format))
    print(shown[["display_name", "strategy", "ours_gb", "paper_gb", "ratio"]].to_string(index=False))
    print(f"wrote {args.out / 'fig08_communication.csv'} and {args.out / 'fig08_communication.png'}")
    return table


if __name__ == "__main__":
    main()
