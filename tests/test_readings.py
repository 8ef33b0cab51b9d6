"""`scripts/readings.py`: the abstract's means under each open reading, one change at a time."""

from __future__ import annotations

import pytest

from hypar_sim.experiments import fig12_topology, main_runs, readings


@pytest.fixture(scope="module")
def quick():
    cache: dict = {}
    return readings.compute(quick=True, workers=1, cache=cache), cache


def test_the_configured_row_is_figure_6s_and_7s_mean(quick):
    table, cache = quick
    figures = main_runs.compute(quick=True, workers=1, cache=cache)
    mean = figures[(figures.network == "geomean") & (figures.strategy == "hypar")].iloc[0]
    configured = table.set_index("reading").loc["as configured"]
    assert configured.speedup_vs_data == pytest.approx(mean.speedup_vs_data, rel=1e-12)
    assert configured.efficiency_vs_data == pytest.approx(mean.efficiency_vs_data, rel=1e-12)
    topology = fig12_topology.FIGURE.compute(quick=True, workers=1, cache=cache)
    hypar = topology[topology.strategy == "hypar"].pivot(index="network", columns="topology",
                                                         values="latency_s")
    faster = int((hypar.torus > hypar.htree * (1 + fig12_topology.TIE)).sum())
    assert configured.htree_faster == faster and configured.networks == len(hypar)


def test_each_reading_changes_what_it_should(quick):
    rows = quick[0].set_index("reading")
    assert list(rows.index) == [r.name for r in readings.READINGS]
    configured = rows.loc["as configured"]
    # A blocking exchange slows both strategies' steps: the speedups move, energy does not.
    assert rows.loc["no overlap"].speedup_vs_data != configured.speedup_vs_data
    assert rows.loc["no overlap"].efficiency_vs_data == pytest.approx(configured.efficiency_vs_data)
    assert rows.loc["no overlap"].dp_gain_2 < configured.dp_gain_2
    # Half the PUs per cube: compute takes longer, so splitting it gains more.
    assert rows.loc["16 vaults per cube"].dp_gain_2 > configured.dp_gain_2


def test_report_names_the_abstract(quick):
    text = readings.report(quick[0])
    assert "3.39x" in text and "| no overlap |" in text
