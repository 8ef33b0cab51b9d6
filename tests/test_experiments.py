"""The figure scripts on the reduced configuration: well-formed results and the paper's claims."""

from __future__ import annotations

import subprocess
import sys

import matplotlib.pyplot as plt
import pandas as pd
import pytest

from hypar_sim.experiments import FIGURES
from hypar_sim.experiments.common import geomean
from hypar_sim.experiments.reproduce import load_figure, reproduce
from hypar_sim.hardware.config import load_hardware
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.planner.options import PlanOptions
from hypar_sim.planner.plan import make_plan
from hypar_sim.runner import SimOptions, simulate
from hypar_sim.workload.network import load_network
from tests.conftest import PAPER, REPO
from tests.test_simulator import layer_phase_cycles

# Rows of every quick table: fig05 (4 + 4 + 5 layers) x 2 levels; 3 networks x 3 strategies
# + 3 geometric means; the 16 x 16 and 4 x 4 plan grids; 2 strategies x 4 counts; 3 networks
# x (2 + 2 + 1) series + 5 means; 2 parts x 2 levels + the mean; 3 networks x 5 variants;
# 5 readings.
QUICK_ROWS = {"fig05_plans": 26, "fig06_performance": 12, "fig07_energy": 12,
              "fig08_communication": 12, "fig09_lenet_space": 256, "fig10_vgga_space": 16,
              "fig11_scalability": 8, "fig12_topology": 20, "fig13_trick": 5,
              "partition_kinds": 15, "readings": 5}


def data_traffic_bytes(network: str, accelerators: int) -> float:
    """Data parallelism's bytes by hand (paper model, fp32): every level h of the binary
    hierarchy has 2**h pairs, each exchanging the whole weight gradient both ways, so
    sum_h 2**h x 2 x 4 W = (accelerators - 1) x 8 W."""
    return (accelerators - 1) * 2 * 4 * load_network(network).weights


def planned_bytes(network: str, strategy: str, accelerators: int, batch: int = 256,
                  **plan) -> float:
    """The planner's traffic for the case (paper model unless `plan` says otherwise)."""
    options = PlanOptions(**({"traffic_model": "paper"} | plan))
    return make_plan(load_network(network), strategy, Hierarchy.for_count(accelerators), batch,
                     options=options).traffic_bytes


def simulated_rows(table: pd.DataFrame) -> pd.DataFrame:
    return table[table.network != "geomean"]


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    """Every figure, reduced configuration, in one folder (one shared run cache)."""
    out = tmp_path_factory.mktemp("results")
    reproduce(out, quick=True, workers=2, progress=False, formats=("png",))  # PDFs: figure_style
    return out


@pytest.mark.parametrize("name", FIGURES)
def test_each_figure_writes_csv_and_png(quick, name):
    table = pd.read_csv(quick / f"{name}.csv")
    assert len(table) == QUICK_ROWS[name]  # pins every case of the quick configuration
    assert (quick / f"{name}.png").read_bytes()[:4] == b"\x89PNG"
    assert not list(quick.glob(".*.tmp"))


def test_readme_has_every_figure(quick):
    text = (quick / "README.md").read_text()
    for name in FIGURES:
        assert f"![{name}]({name}.png)" in text
    assert text.count("**The paper.**") == text.count("**Where and why we differ.**") == len(FIGURES)


def test_hypar_traffic_never_above_data_and_sconv_is_data(quick):
    table = pd.read_csv(quick / "fig08_communication.csv")
    traffic = table.pivot(index="network", columns="strategy", values="ours_gb")
    assert (traffic.hypar <= traffic.data).all()
    plans = pd.read_csv(quick / "fig05_plans.csv")
    assert (plans[plans.network == "sconv"].choice == "dp").all()


def test_quick_data_parallel_traffic_is_the_hand_formula(quick):
    """Pins Data Parallelism's bytes in every table that has them to (N - 1) x 8 W: e.g.
    lenet_c (W = 430,500) moves 10,332,000 B on 4 accelerators, 24,108,000 on 8."""
    columns = {"fig06_performance": ("traffic_bytes", 1), "fig07_energy": ("traffic_bytes", 1),
               "fig08_communication": ("ours_gb", 1e9), "fig11_scalability": ("traffic_bytes", 1),
               "fig12_topology": ("traffic_bytes", 1)}
    for name, (column, scale) in columns.items():
        table = simulated_rows(pd.read_csv(quick / f"{name}.csv"))
        data = table[table.strategy == "data"]
        assert len(data) >= 3
        for row in data.itertuples():
            assert getattr(row, column) * scale == pytest.approx(
                data_traffic_bytes(row.network, int(row.accelerators)), rel=1e-12), (name, row)


def test_quick_simulated_traffic_matches_the_planner(quick):
    """Every simulated row's bytes (the sum of its messages) are the planner's traffic for
    that case; Figure 8's planner-only numbers are Figure 6's simulated ones; the
    partition_kinds table's paper/greedy row is Figure 8's HyPar."""
    for name in ("fig06_performance", "fig07_energy", "fig11_scalability", "fig12_topology"):
        for row in simulated_rows(pd.read_csv(quick / f"{name}.csv")).itertuples():
            assert row.traffic_bytes == planned_bytes(row.network, row.strategy,
                                                      int(row.accelerators)), (name, row)
    for name, hierarchy in (("fig09_lenet_space", (2, 2)), ("fig10_vgga_space", (2, 2))):
        table = pd.read_csv(quick / f"{name}.csv")
        net = load_network(table.network.iloc[0])
        for row in table.itertuples():
            assert row.traffic_bytes == make_plan(net, "explicit", Hierarchy(hierarchy), 256,
                                                  plan_text=row.plan_text, options=PAPER).traffic_bytes
    fig08 = simulated_rows(pd.read_csv(quick / "fig08_communication.csv"))
    fig06 = simulated_rows(pd.read_csv(quick / "fig06_performance.csv"))
    ours = fig08.set_index(["network", "strategy"]).ours_gb * 1e9
    simulated = fig06.set_index(["network", "strategy"]).traffic_bytes
    assert ours.to_dict() == pytest.approx(simulated.loc[ours.index].to_dict(), rel=1e-12)
    kinds = pd.read_csv(quick / "partition_kinds.csv")
    paper = kinds[kinds.variant == "paper, greedy, batch+in"].set_index("network").traffic_gb
    assert paper.to_dict() == pytest.approx(
        fig08[fig08.strategy == "hypar"].set_index("network").ours_gb.to_dict(), rel=1e-12)
    for row in kinds.itertuples():  # every variant: the planner with its options
        assert row.traffic_gb * 1e9 == pytest.approx(planned_bytes(
            row.network, "hypar", int(row.accelerators), kinds=tuple(row.kinds.split(",")),
            search=row.search, traffic_model=row.traffic_model), rel=1e-12), row


def test_quick_latency_agrees_with_the_analytic_engine(quick):
    """Pins every simulated latency of Figures 6 and 12 to the closed-form engine's: on 4
    accelerators every pair has links of its own (H-tree and 2 x 2 torus), where the two
    engines agree within 2% (sim/analytic.py; measured at most 1.8e-4). The speedups are
    the latency ratios they claim to be."""
    fig06 = simulated_rows(pd.read_csv(quick / "fig06_performance.csv"))
    fig12 = simulated_rows(pd.read_csv(quick / "fig12_topology.csv"))
    for row in [*fig06.itertuples(), *fig12.itertuples()]:
        count = int(row.accelerators)
        overrides = {}
        topology = row.topology
        if topology == "torus-equal-total":
            overrides["torus_bandwidth"] = "total"
            topology = "torus"
        net = load_network(row.network)
        plan = make_plan(net, row.strategy, Hierarchy.for_count(count), 256, options=PAPER)
        analytic = simulate(net, plan, load_hardware(overrides=overrides),
                            SimOptions(topology=topology, engine="analytic"))
        assert row.latency_s == pytest.approx(analytic.latency_s, rel=0.02), row
    latency = fig06.set_index(["network", "strategy"]).latency_s
    for row in fig06.itertuples():
        assert row.speedup_vs_data == pytest.approx(latency[(row.network, "data")]
                                                    / row.latency_s, rel=1e-12)
    means = pd.read_csv(quick / "fig06_performance.csv").query("network == 'geomean'")
    for row in means.itertuples():
        assert row.speedup_vs_data == pytest.approx(
            geomean(fig06[fig06.strategy == row.strategy].speedup_vs_data), rel=1e-12)


def test_hypar_never_slower_than_data(quick):
    table = pd.read_csv(quick / "fig06_performance.csv")
    hypar = table[(table.strategy == "hypar") & (table.network != "geomean")]
    assert (hypar.speedup_vs_data >= 0.999).all()


def test_hypar_scales_further(quick):
    table = pd.read_csv(quick / "fig11_scalability.csv")
    top = table[table.accelerators == table.accelerators.max()].set_index("strategy")
    assert top.gain_vs_one["hypar"] > top.gain_vs_one["data"]
    assert top.traffic_gb["hypar"] < top.traffic_gb["data"]
    check_scalability_values(table)


def check_scalability_values(table: pd.DataFrame) -> None:
    """Figure 11's quick table (lenet_c on 1, 2, 4, 8 accelerators) by hand: one accelerator
    takes the sum of its layers' phase costs (hardware/costs.py; 1,658,744.6 cycles = 6.635
    ms at 250 MHz) for either strategy, the gains are that over each latency, and Data
    Parallelism moves (N - 1) x 8 W bytes."""
    config = load_hardware()
    net = load_network("lenet_c")
    one = sum(layer_phase_cycles(layer, i, 256, config) for i, layer in enumerate(net.layers))
    assert sorted(table.accelerators.unique()) == [1, 2, 4, 8]
    for row in table.itertuples():
        if row.accelerators == 1:
            assert row.latency_s == pytest.approx(one / config.clock_hz, rel=1e-12)
            assert row.traffic_bytes == 0
        assert row.gain_vs_one == pytest.approx(one / config.clock_hz / row.latency_s, rel=1e-12)
        assert row.traffic_gb == pytest.approx(row.traffic_bytes / 1e9, rel=1e-12)
        if row.strategy == "data":
            assert row.traffic_bytes == data_traffic_bytes("lenet_c", int(row.accelerators))


def test_space_exploration_finds_peak_and_hypar(quick):
    for name in ("fig09_lenet_space", "fig10_vgga_space"):
        table = pd.read_csv(quick / f"{name}.csv")
        assert table.is_hypar.sum() == 1
        assert table.relative_to_best.max() == pytest.approx(1.0)
        hypar = table[table.is_hypar].iloc[0]
        assert hypar.traffic_bytes == table.traffic_bytes.min()  # HyPar minimises traffic
        # the relative column is what it says; HyPar's cell is Figure 5's plan
        assert table.relative_to_best.to_list() == pytest.approx(
            (table.latency_s.min() / table.latency_s).to_list(), rel=1e-12)
        plans = pd.read_csv(quick / "fig05_plans.csv")
        plans = plans[plans.network == hypar.network]
        assert hypar.plan_text == "; ".join(" ".join(level.choice)
                                            for _, level in plans.groupby("level", sort=True))


def test_trick_never_beats_hypar(quick):
    table = pd.read_csv(quick / "fig13_trick.csv")
    assert (table.performance_vs_trick >= 0.999).all()
    # The quick run's two-level cases (4 accelerators) are cases of the full run: every value
    # equals the committed results/fig13_trick.csv row (e.g. conv5-b32-h2's trick step
    # 0.3287 s, HyPar's 0.2408 s).
    committed = pd.read_csv(REPO / "results" / "fig13_trick.csv").set_index("case")
    shared = table.set_index("case").loc[["conv5-b32-h2", "fc3-b4096-h2"]]
    for column in ("trick_latency_s", "hypar_latency_s", "trick_energy_j", "hypar_energy_j",
                   "trick_traffic_gb", "hypar_traffic_gb", "performance_vs_trick",
                   "efficiency_vs_trick"):
        assert shared[column].to_list() == pytest.approx(
            committed.loc[shared.index, column].to_list(), rel=1e-9), column
    assert shared.hypar_plan.to_list() == committed.loc[shared.index, "hypar_plan"].to_list()


def test_htree_beats_torus_at_equal_total_bandwidth():
    """The paper's claim at its 16 accelerators (a 2x2 torus already has the H-tree's total
    and direct neighbours, so the quick configuration cannot show it)."""
    from hypar_sim.sweep import Case, run_cases

    equal = (("torus_bandwidth", "total"),)  # 0.8 Gb/s: 32 torus links vs 16 per H-tree level
    for network in ("lenet_c", "cifar_c"):
        htree, torus = run_cases([Case(network, "hypar", "htree", 16, 256),
                                  Case(network, "hypar", "torus", 16, 256, overrides=equal)],
                                 workers=1)
        assert float(torus["latency_s"]) > float(htree["latency_s"])


@pytest.mark.slow  # a default run on 2 cores stays under 5 minutes
def test_script_runs_alone(tmp_path):
    result = subprocess.run([sys.executable, "scripts/fig11_scalability.py", "--quick", "--out",
                             str(tmp_path)], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "HyPar scales further than Data Parallelism: **True**" in result.stdout
    table = pd.read_csv(tmp_path / "fig11_scalability.csv")
    assert len(table) == 8
    check_scalability_values(table)


def test_committed_results_are_complete():
    for name in FIGURES:
        assert (REPO / "results" / f"{name}.csv").exists()
        assert (REPO / "results" / f"{name}.png").exists()
    assert load_figure("fig08_communication").title in (REPO / "results" / "README.md").read_text()


def test_committed_results_match_the_planner():
    """The committed tables' bytes and plans are the current planner's: Data Parallelism's
    (N - 1) x 8 W by hand (e.g. VGG-A on 16 accelerators: 15 x 8 x 132.9 M = 15.94 GB),
    every other strategy's plan traffic, and Figure 5's choices HyPar's plan (16
    accelerators unless the row says otherwise)."""
    columns = {"fig06_performance": ("traffic_bytes", 1), "fig07_energy": ("traffic_bytes", 1),
               "fig08_communication": ("ours_gb", 1e9), "fig11_scalability": ("traffic_bytes", 1),
               "fig12_topology": ("traffic_bytes", 1)}
    for name, (column, scale) in columns.items():
        table = simulated_rows(pd.read_csv(REPO / "results" / f"{name}.csv"))
        for row in table.itertuples():
            value, count = getattr(row, column) * scale, int(row.accelerators)
            if row.strategy == "data":
                assert value == pytest.approx(data_traffic_bytes(row.network, count),
                                              rel=1e-12), (name, row)
            assert value == pytest.approx(planned_bytes(row.network, row.strategy, count,
                                                        int(getattr(row, "batch", 256))),
                                          rel=1e-12), (name, row)
    plans = pd.read_csv(REPO / "results" / "fig05_plans.csv")
    for network, part in plans.groupby("network"):
        net = load_network(network)
        plan = make_plan(net, "hypar", 4, 256, options=PAPER)
        for row in part.itertuples():
            kind = plan.choices[int(row.level[1:]) - 1][net.layer_names.index(row.layer)]
            assert {"batch": "dp", "in": "mp"}[kind] == row.choice, row


def test_reproduce_command_rejects_unknown_figure(cli, tmp_path):
    result = cli("reproduce", "--only", "fig99", "--out", str(tmp_path))
    assert result.returncode == 2 and "unknown figure 'fig99'" in result.stderr


def test_fig11_beyond_the_paper_panel_and_text():
    """With batch-1,024 rows (the full run's 64 to 1,024 accelerators), Figure 11 draws a
    third panel of throughput and its report states the gain over the range."""
    from hypar_sim.experiments import fig11_scalability as fig11

    rows = [("data", n, 256, 2.0) for n in (1, 2)] + [("hypar", n, 256, 2.0 / n) for n in (1, 2)]
    rows += [("data", n, 1024, 4.0) for n in (64, 128)]
    rows += [("hypar", n, 1024, 1.0 / (n // 64)) for n in (64, 128)]
    table = pd.DataFrame(rows, columns=["strategy", "accelerators", "batch", "latency_s"])
    table["network"], table["traffic_gb"] = "vgg_a", 1.0
    single = table[table.accelerators == 1].set_index("strategy").latency_s
    table["gain_vs_one"] = table.strategy.map(single) / table.latency_s
    table["samples_per_s"] = table.batch / table.latency_s
    figure = fig11.plot(table)
    assert len(figure.axes) == 3
    assert "samples/s" in figure.axes[2].get_ylabel()
    plt.close(figure)
    text = fig11.report(table)
    assert "from 64 to 128 accelerators HyPar's throughput goes from 1.02e+03 to 2.05e+03 " \
           "samples/s (2x for 2x the accelerators)" in text
