"""`run --plot`: the step's figure (time per layer by phase, link busy shares by tier)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from hypar_sim.plots import tier


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
