"""A simulated step at a glance (`run --plot FILE`): where the time went, and the links.

Left: per layer (or graph node), the slowest member's compute time of each
phase and the mean time spent waiting for messages, stacked, in ms. Right: a
heat map of every directed link's busy share of the step, one row per tier
of the network (a fat tree's links into switch level h are tier h; a torus
has one tier), so a bottleneck level shows as a hot row. PNG, PDF or SVG by
the file's suffix, 300 dpi, in the style of every figure (`figure_style`).
"""

from __future__ import annotations

import re

from hypar_sim.results import SimResult

_PHASES = (("forward_cycles", "forward"), ("backward_cycles", "backward"),
           ("gradient_cycles", "weight gradient"), ("update_cycles", "update"),
           ("comm_wait_cycles", "waiting for messages"))


def tier(link: str) -> int:
    """A link's tier: the highest switch level it touches (0: accelerator to accelerator)."""
    levels = [int(level) for level in re.findall(r"S(\d+)\.", link)]
    return max(levels, default=0)


def step_figure(result: SimResult):
    """The figure of one simulated step (matplotlib, imported here)."""
    from hypar_sim.figure_style import style

    with style():
        return _draw(result)


def _draw(result: SimResult):
    import matplotlib.pyplot as plt
    import numpy as np

    from hypar_sim.figure_style import SMALL, TINY

    ms = 1e3 / result.clock_hz
    fig, (bars, heat) = plt.subplots(1, 2, figsize=(13, 4.8),
                                     gridspec_kw={"width_ratios": [3, 2]})
    names = [layer.name for layer in result.per_layer]
    bottom = np.zeros(len(names))
    for field, label in _PHASES:
        values = np.array([getattr(layer, field) for layer in result.per_layer]) * ms
        bars.bar(range(len(names)), values, bottom=bottom, label=label, edgecolor="black",
                 linewidth=0.3)
        bottom += values
    bars.set_xticks(range(len(names)))
    bars.set_xticklabels(names, rotation=90, fontsize=TINY if len(names) > 30 else SMALL)
    bars.set_ylabel("time per layer (ms)")
    bars.set_title(f"{result.network}, {result.strategy}, {result.accelerators} accelerators: "
                   f"{result.latency_s * 1e3:.1f} ms per step")
    bars.legend()
    tiers: dict[int, list[float]] = {}
    for link in result.per_link:
        tiers.setdefault(tier(link.link), []).append(link.busy_fraction)
    rows = sorted(tiers)
    width = max((len(v) for v in tiers.values()), default=1)
    grid = np.full((max(len(rows), 1), width), np.nan)
    for r, key in enumerate(rows):
        grid[r, :len(tiers[key])] = tiers[key]
    image = heat.imshow(grid, aspect="auto", cmap="magma", vmin=0, vmax=1,
                        interpolation="nearest")
    heat.set_yticks(range(len(rows)))
    heat.set_yticklabels([f"tier {key}" for key in rows])
    heat.set_xlabel("link (within its tier)")
    heat.set_title(f"link busy share of the step ({result.topology})")
    fig.colorbar(image, ax=heat, label="busy share")
    return fig


def save_step_figure(result: SimResult, path: str) -> None:
    """Write the figure to `path` (PNG, PDF or SVG by its suffix), atomically."""
    from hypar_sim.figure_style import figure_format, save_figure

    figure_format(path, "--plot")
    save_figure(step_figure(result), path)
