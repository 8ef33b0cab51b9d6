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
    assert configured.htree_faster_networks == faster and configured.networks == len(hypar)


def test_each_reading_changes_what_it_should(quick):
    rows = quick[0].set_index("reading")
    assert list(rows.index) == [r.name for r in readings.READINGS]
    configured = rows.loc["as configured"]
    # A blocking exchange slows both strategies' steps: the speedups move, energy does not,
    # and data parallelism, whose exchange was hidden, gains less from splitting.
    assert rows.loc["no overlap"].speedup_vs_data != configured.speedup_vs_data
    assert rows.loc["no overlap"].efficiency_vs_data == pytest.approx(configured.efficiency_vs_data)
    assert rows.loc["no overlap"].dp_gain_2 < configured.dp_gain_2
    # Mappings by cycles make each PU faster: communication weighs more, splitting gains less.
    assert rows.loc["mapper by cycles"].dp_gain_2 < configured.dp_gain_2
    # Half the PUs per cube: compute takes longer, so splitting it gains more.
    assert rows.loc["16 vaults per cube"].dp_gain_2 > configured.dp_gain_2
    # The pair's torus setting touches only the torus runs: every H-tree number is no overlap's.
    pair, blocking = rows.loc["no overlap, torus at equal total"], rows.loc["no overlap"]
    for column in ("speedup_vs_data", "efficiency_vs_data", "dp_gain_2", "dp_gain_4"):
        assert pair[column] == blocking[column]
    assert '"torus_bandwidth": "total"' in pair.options and '"overlap_gradients": false' in \
        pair.options


def test_the_pair_slows_only_the_torus_runs():
    pair = next(r for r in readings.READINGS if r.name == "no overlap, torus at equal total")
    cases = readings._cases(pair, ("sfc",), 16, "vgg_a", (1, 2))
    assert {(c.network, c.strategy, c.topology, c.accelerators) for c in cases} == {
        ("sfc", "data", "htree", 16), ("sfc", "hypar", "htree", 16), ("sfc", "hypar", "torus", 16),
        ("vgg_a", "data", "htree", 1), ("vgg_a", "data", "htree", 2)}
    assert not any(c.overlap for c in cases)
    # the torus alone reads the key: the H-tree runs are the "no overlap" reading's own
    assert all(c.overrides == ((("torus_bandwidth", "total"),) if c.topology == "torus" else ())
               for c in cases)


def test_report_names_the_abstract(quick):
    text = readings.report(quick[0])
    assert "3.39x" in text and "| no overlap |" in text
