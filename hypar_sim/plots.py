"""A simulated step at a glance (`run --plot FILE`): where the time went, and the links.

Left: per layer (or graph node), the slowest member's compute time of each
phase and the mean time spent waiting for messages, stacked, in ms; with more
than `MAX_NAMES` layers every k-th name is shown. Right: a heat map of every
directed link's busy share of the step. On a switched network (H-tree, fat
tree, a topology file) a row is a hierarchy level, named as the traffic summary
names it (H1 the top level, whose links touch the root switches), so a
bottleneck level shows as a hot row; on a direct network (torus) a row is an
accelerator and its columns its outgoing links. PNG, PDF or SVG by the file's
suffix, 300 dpi, in the style of every figure (`figure_style`).
"""

from __future__ import annotations

import math
import re
from pathlib import Path

from hypar_sim.results import SimResult

_PHASES = (("forward_cycles", "forward"), ("backward_cycles", "backward"),
           ("gradient_cycles", "weight gradient"), ("update_cycles", "update"),
           ("recompute_cycles", "recomputed forward"),
           ("comm_wait_cycles", "waiting for messages"))

#: Layer names shown under the bars at most (more overlap at the figure's width).
MAX_NAMES = 40


def tier(link: str) -> int:
    """A link's tier: the highest switch level it touches (0: accelerator to accelerator;
    switch level 1 is the leaves')."""
    levels = [int(level) for level in re.findall(r"S(\d+)\.", link)]
    return max(levels, default=0)


def heat_rows(links: list[tuple[str, float]]) -> tuple[list[str], list[list[float]], str]:
    """The heat map's rows of busy shares, their labels and what a column is.

    Switched links: one row per hierarchy level, H1 (the top, the highest switch tier)
    first. Direct links (`A3>A7`): one row per sending accelerator, in index order."""
    tiers: dict[int, list[float]] = {}
    for link, busy in links:
        tiers.setdefault(tier(link), []).append(busy)
    switched = [key for key in tiers if key > 0]
    if switched:
        top = max(switched)
        rows = sorted(switched, reverse=True)
        labels = [f"H{top - key + 1}" for key in rows]
        values = [tiers[key] for key in rows]
        if 0 in tiers:
            labels.append("direct")
            values.append(tiers[0])
        return labels, values, "link of the level (both directions)"
    senders: dict[int, list[float]] = {}
    for link, busy in links:
        senders.setdefault(int(link.split(">")[0].lstrip("A")), []).append(busy)
    order = sorted(senders)
    return [f"A{key}" for key in order], [senders[key] for key in order], \
        "outgoing link of the accelerator"


def step_figure(result: SimResult):
    """The figure of one simulated step (matplotlib, imported here)."""
    from hypar_sim.figure_style import style

    with style():
        return _draw(result)


def _draw(result: SimResult):
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.ticker import MaxNLocator

    from hypar_sim.figure_style import PALETTE, SMALL, TINY
    from hypar_sim.report import training_note

    ms = 1e3 / result.clock_hz
    fig, (bars, heat) = plt.subplots(1, 2, figsize=(13, 5.2),
                                     gridspec_kw={"width_ratios": [3, 2]})
    names = [layer.name for layer in result.per_layer]
    bottom = np.zeros(len(names))
    # the palette's five colours in order; a recomputed forward pass hatched on white
    looks = {"recompute_cycles": {"color": "white", "hatch": "////"},
             "comm_wait_cycles": {"color": PALETTE[4]}}
    shades = iter(PALETTE)
    for field, label in _PHASES:
        values = np.array([getattr(layer, field) for layer in result.per_layer]) * ms
        look = looks.get(field) or {"color": next(shades)}
        if field == "recompute_cycles" and not values.any():
            continue  # nothing recomputed: no legend entry
        bars.bar(range(len(names)), values, bottom=bottom, label=label, edgecolor="black",
                 linewidth=0.3 if len(names) <= MAX_NAMES else 0, **look)
        bottom += values
    every = max(1, math.ceil(len(names) / MAX_NAMES))
    shown = range(0, len(names), every)
    bars.set_xticks(list(shown))
    bars.set_xticklabels([names[i] for i in shown], rotation=90,
                         fontsize=TINY if len(shown) > 30 else SMALL)
    bars.set_xlim(-0.6, len(names) - 0.4)
    bars.set_xlabel(f"{len(names)} layers" + (f" (one name in {every} shown)"
                                              if every > 1 else ""))
    bars.set_ylabel("time per layer (ms)")
    bars.legend(ncol=len(_PHASES), loc="lower left", bbox_to_anchor=(0, 1.0),
                frameon=False, fontsize=SMALL, handlelength=1.2, columnspacing=1.0)
    fig.suptitle(f"{result.network}, {result.strategy}, {result.accelerators} accelerators "
                 f"({result.topology}){training_note(result.config or {})}: "
                 f"{result.latency_s * 1e3:.4g} ms per step")
    labels, values, column = heat_rows([(link.link, link.busy_fraction)
                                        for link in result.per_link])
    width = max((len(row) for row in values), default=1)
    grid = np.full((max(len(values), 1), width), np.nan)
    for r, row in enumerate(values):
        grid[r, :len(row)] = row
    image = heat.imshow(grid, aspect="auto", cmap="magma", vmin=0, vmax=1,
                        interpolation="nearest")
    step = max(1, math.ceil(len(labels) / MAX_NAMES))
    heat.set_yticks(range(0, len(labels), step))
    heat.set_yticklabels(labels[::step], fontsize=TINY if len(labels) > 16 else SMALL)
    heat.xaxis.set_major_locator(MaxNLocator(integer=True))
    heat.set_xlabel(column)
    heat.set_title("link busy share of the step", fontsize=SMALL + 2)
    fig.colorbar(image, ax=heat, label="busy share")
    return fig


def step_figure_bytes(result: SimResult, path: str) -> bytes:
    """The figure's file for `path` (PNG, PDF or SVG by its suffix), not yet written."""
    from hypar_sim.figure_style import figure_format, render_figure

    figure_format(path, "--plot")
    return render_figure(step_figure(result), path)[Path(path)]
