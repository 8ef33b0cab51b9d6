"""`run --plot`: the step's figure (time per layer by phase, link busy shares by tier)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hypar_sim.plots import heat_rows, tier


def test_link_tiers():
    assert tier("A3>S1.1") == 1 and tier("S2.0>S3.1") == 3 and tier("A5>A6") == 0


@pytest.mark.parametrize("suffix, magic", [("png", b"\x89PNG"), ("pdf", b"%PDF"),
                                           ("svg", b"<?xml")])
def test_run_plot_writes_the_figure(tmp_path, suffix, magic):
    path = tmp_path / f"step.{suffix}"
    done = subprocess.run([sys.executable, "-m", "hypar_sim", "run", "lenet_c",
                           "--accelerators", "4", "--engine", "analytic", "--plot", str(path)],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert path.read_bytes().startswith(magic)


def test_a_plot_of_another_format_is_refused_before_running(tmp_path):
    done = subprocess.run([sys.executable, "-m", "hypar_sim", "run", "lenet_c", "--plot",
                           str(tmp_path / "step.gif")], capture_output=True, text=True)
    assert done.returncode == 2 and ".png, .pdf or .svg" in done.stderr
    assert not list(tmp_path.iterdir())


def test_heat_rows_name_levels_as_the_traffic_summary_does():
    """Issue "Hardening": the heat map's "tier 1" was the leaf links while the summary's H1
    is the top level; a torus showed one barcode row. Now switched links are rows H1 (the
    root's) down to the leaves', and direct links a row per sending accelerator."""
    links = [("A0>S1.0", 0.1), ("S1.0>S2.0", 0.5), ("S2.0>S1.1", 0.6), ("S1.1>A2", 0.2)]
    labels, values, _ = heat_rows(links)
    assert labels == ["H1", "H2"] and values == [[0.5, 0.6], [0.1, 0.2]]
    labels, values, column = heat_rows([("A1>A0", 0.3), ("A0>A1", 0.4), ("A0>A3", 0.5)])
    assert labels == ["A0", "A1"] and values == [[0.4, 0.5], [0.3]]
    assert column == "outgoing link of the accelerator"


def test_a_long_network_shows_at_most_forty_names():
    import hypar_sim
    from hypar_sim.plots import MAX_NAMES, step_figure

    result = hypar_sim.simulate("resnet18", accelerators=4, batch=16, engine="analytic")
    import matplotlib.pyplot as plt

    figure = step_figure(result)
    plt.close(figure)
    bars = figure.axes[0]
    shown = [label.get_text() for label in bars.get_xticklabels()]
    assert len(result.per_layer) > MAX_NAMES >= len(shown) > MAX_NAMES // 2
    assert "one name in" in bars.get_xlabel()
    legend = bars.get_legend()
    assert legend.get_bbox_to_anchor().y0 >= bars.get_window_extent().y1 - 1  # above the bars
