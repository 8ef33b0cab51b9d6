"""Beyond the paper: both traffic models, and what more split kinds and a joint search save.

For the ten networks (16 accelerators, batch 256): HyPar's plan and its
traffic under the `paper` model (Figure 8's reading); the same greedy
search under the `layout` model (traffic from the members' real layouts);
the joint search over every level at once with kinds {batch, in},
{batch, in, out} (AccPar's space) and all four (Tofu's spatial split too).
The joint search is exact for its traffic model, so it can never be above
the greedy search with fewer kinds: the table checks it.
"""

from __future__ import annotations

import matplotlib.pyplot as plt
import pandas as pd

from hypar_sim.experiments.common import QUICK_NETWORKS, Figure, geomean, markdown_table
from hypar_sim.paper import DISPLAY_NAMES, PAPER_NETWORKS
from hypar_sim.partition.kinds import DEFAULT_KINDS, Dim, kind_of
from hypar_sim.planner.options import PlanOptions
from hypar_sim.planner.plan import make_plan
from hypar_sim.workload.network import load_network

_HYPAR = DEFAULT_KINDS
_WITH_OUT = (*_HYPAR, kind_of(Dim.K))
_ALL_FOUR = (*_WITH_OUT, kind_of(Dim.P))

#: (label, traffic model, search, kinds)
VARIANTS = (
    (f"paper, greedy, {'+'.join(_HYPAR)}", "paper", "greedy", _HYPAR),
    (f"layout, greedy, {'+'.join(_HYPAR)}", "layout", "greedy", _HYPAR),
    (f"layout, joint, {'+'.join(_HYPAR)}", "layout", "joint", _HYPAR),
    (f"layout, joint, {'+'.join(_WITH_OUT)}", "layout", "joint", _WITH_OUT),
    ("layout, joint, all four", "layout", "joint", _ALL_FOUR),
)


def compute(quick: bool = False, workers: int | None = None, cache: dict | None = None) -> \
        pd.DataFrame:
    networks = QUICK_NETWORKS if quick else PAPER_NETWORKS
    levels = 2 if quick else 4
    rows = []
    for name in networks:
        net = load_network(name)
        for label, model, search, kinds in VARIANTS:
            plan = make_plan(net, "hypar", levels, 256, options=PlanOptions(kinds, search, model))
            rows.append({"network": name, "display_name": DISPLAY_NAMES[name], "variant": label,
                         "traffic_model": model, "search": search, "kinds": ",".join(kinds),
                         "accelerators": 2**levels, "batch": 256,
                         "traffic_gb": plan.traffic_bytes / 1e9,
                         "plan": "; ".join(" ".join(level) for level in plan.choices)})
    return pd.DataFrame(rows)


def plot(table: pd.DataFrame):
    names = list(dict.fromkeys(table.display_name))
    labels = [v[0] for v in VARIANTS]
    fig, ax = plt.subplots(figsize=(12, 4.8))
    width = 0.8 / len(labels)
    for k, label in enumerate(labels):
        part = table[table.variant == label].set_index("display_name").loc[names]
        ax.bar([i + (k - (len(labels) - 1) / 2) * width for i in range(len(names))],
               part.traffic_gb, width, label=label, edgecolor="black", linewidth=0.4)
    ax.set_yscale("log")
    ax.set_xticks(range(len(names)), names)
    ax.set_ylabel("communication per training step (GB, log scale)")
    acc = int(table.accelerators.iloc[0])
    ax.set_title(f"Traffic models and split kinds: HyPar's search vs the joint search, {acc} "
                 "accelerators, batch 256")
    ax.legend(loc="upper left", ncol=2)
    ax.grid(axis="y", which="both")
    return fig


def report(table: pd.DataFrame) -> str:
    wide = table.pivot(index="display_name", columns="variant", values="traffic_gb")
    wide = wide[[v[0] for v in VARIANTS]].loc[list(dict.fromkeys(table.display_name))]
    greedy, joint = wide[VARIANTS[1][0]], wide[VARIANTS[2][0]]
    more = wide[[VARIANTS[3][0], VARIANTS[4][0]]].min(axis=1)
    lines = [
        "Traffic per training step, GB (geometric means: " + ", ".join(
            f"{label} {geomean(wide[label]):.4g}" for label in wide.columns) + ").",
        f"The joint search is never above the greedy one under the same model and kinds: "
        f"**{bool((joint <= greedy * (1 + 1e-12)).all())}**; with more kinds it is never above "
        f"greedy with batch and in: **{bool((more <= greedy * (1 + 1e-12)).all())}**.",
        "",
        markdown_table(wide.reset_index().rename(columns={"display_name": "network"})),
    ]
    return "\n".join(lines)


FIGURE = Figure("partition_kinds", "Traffic models and split kinds (beyond the paper)", compute,
                plot, report)
main = FIGURE.main
