"""Plans within a cube's memory (`planner.memory`, issue "seeds' planners" part 7)."""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hypar_sim.errors import InputError
from hypar_sim.hardware.config import load_hardware
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.planner.options import PlanOptions
from hypar_sim.planner.plan import evaluate_plan, make_plan
from hypar_sim.runner import SimOptions, simulate
from hypar_sim.workload.network import as_graph, load_network, load_workload

MIB = 2**20


def _needs(network, batch, hierarchy):
    """Every batch/in plan of a chain on `hierarchy`: (bytes per cube, columns)."""
    graph = as_graph(network)
    plans = []
    for columns in itertools.product(itertools.product(("batch", "in"), repeat=hierarchy.levels),
                                     repeat=len(network.layers)):
        need = evaluate_plan(graph, "x", "", batch, hierarchy, columns).footprint_bytes
        plans.append((need, columns))
    return plans


def _config(capacity_bytes: float, accelerators: int = 4, batch: int = 64):
    return load_hardware(overrides={"cube_capacity_gib": capacity_bytes / 2**30})


@pytest.mark.parametrize(("name", "slack"), [
    ("sconv", 0.0), pytest.param("cifar_c", 0.01, marks=pytest.mark.slow)])  # cifar_c: 15 s
def test_fitted_plan_is_the_best_that_fits(name, slack):
    """With the cube's memory between the leanest plan's need and the byte-optimal plan's,
    hypar's joint search returns a plan that fits and moves the fewest bytes of every plan
    that fits (brute force over all 256 batch/in plans on 4 accelerators), exactly on sconv;
    on cifar_c the price's relaxation leaves a gap (3,292,416 bytes against 3,287,296)."""
    network, hierarchy, batch = load_network(name), Hierarchy.for_count(4), 64
    plans = _needs(network, batch, hierarchy)
    free = make_plan(network, "hypar", hierarchy, batch, options=PlanOptions(search="joint"))
    free_need = next(need for need, columns in plans if columns == free.columns)
    least = min(need for need, _ in plans)
    assert least < free_need
    capacity = (least + free_need) / 2
    fitted = make_plan(network, "hypar", hierarchy, batch, options=PlanOptions(search="joint"),
                       config=_config(capacity))
    need = next(n for n, columns in plans if columns == fitted.columns)
    assert need <= capacity < free_need
    best = min(evaluate_plan(network, "x", "", batch, hierarchy, columns).traffic_bytes
               for n, columns in plans if n <= capacity)
    assert best <= fitted.traffic_bytes <= best * (1 + slack)
    assert fitted.traffic_bytes > free.traffic_bytes


def test_a_fitted_plan_runs_where_the_free_one_does_not():
    """VGG-A on 4 accelerators, batch 64, cubes of 0.47 GiB: hypar's byte-optimal plan needs
    more; the memory-aware search finds one that the simulator accepts."""
    network = load_network("vgg_a")
    config = _config(0.47 * 2**30)
    plan = make_plan(network, "hypar", 2, 64, options=PlanOptions(), config=config)
    free = make_plan(network, "hypar", 2, 64, options=PlanOptions())
    assert plan.columns != free.columns
    assert simulate(network, plan, config, SimOptions(engine="analytic")).latency_cycles > 0
    with pytest.raises(InputError, match="capacity: vgg_a needs"):
        simulate(network, free, config, SimOptions(engine="analytic"))


def test_strategies_that_follow_their_paper_are_refused_with_the_memory_they_need():
    network = load_network("vgg_a")
    with pytest.raises(InputError, match=r"strategy data's plan needs 1.46 GiB per cube, more "
                                         r"than the cube's 0.45 GiB .*none can need less than "
                                         r"0.426"):
        make_plan(network, "data", 2, 64, options=PlanOptions(), config=_config(0.45 * 2**30))


def test_no_plan_fits_one_line_exit_2():
    run = subprocess.run([sys.executable, "-m", "hypar_sim", "plan", "vgg_a", "--accelerators",
                          "4", "--batch", "64", "--set", "cube_capacity_gib=0.42"],
                         capture_output=True, text=True, check=False)
    assert run.returncode == 2
    assert run.stderr.count("\n") == 1
    assert "no plan of kinds batch,in fits vgg_a in a cube: the leanest needs at least 0.426 " \
           "GiB per cube" in run.stderr


GRAPH_KINDS = ("batch", "in", "out", "spatial", "heads")


@pytest.mark.parametrize("strategy", ["data", "model", "trick", "hypar", "tofu", "accpar", "grid",
                                      pytest.param("optimal", marks=pytest.mark.slow)])
@pytest.mark.parametrize("graph_name", ["residual", "inception", "attention"])
def test_graph_plans_fit_a_cube_or_give_the_need_and_the_capacity(graph_name, strategy):
    """Issue "One graph", item 4: with a cube of half what data parallelism needs, every
    strategy's graph plan fits (its footprint, and the simulator's own check, which adds
    the same receive buffers when gradients are not bucketed) or the planner exits with one
    line giving the need and the capacity in GiB; hypar re-plans with a price on memory
    wherever some plan fits, optimal too."""
    from tests import test_graph_plan

    graph, hierarchy, batch = getattr(test_graph_plan, graph_name)(), Hierarchy.for_count(4), 8
    capacity = make_plan(graph, "data", hierarchy, batch).footprint_bytes / 2
    config = load_hardware(overrides={"cube_capacity_gib": capacity / 2**30})
    options = PlanOptions(GRAPH_KINDS)
    try:
        plan = make_plan(graph, strategy, hierarchy, batch, options=options, config=config)
    except InputError as exc:
        message = str(exc)
        assert "\n" not in message and f"{capacity / 2**30:.3g} GiB" in message
        assert "needs" in message and strategy not in ("hypar", "optimal") or "no plan" in message
        return
    assert plan.footprint_bytes <= capacity
    free = make_plan(graph, strategy, hierarchy, batch, options=options)
    assert plan.footprint_bytes <= free.footprint_bytes
    simulate(graph, plan, config, SimOptions(engine="analytic", bucket_mb=0))  # no refusal


def test_graph_footprint_is_what_the_simulator_checks():
    """The plan's footprint (the busiest cube's weights, gradients, kept outputs and the
    largest receive of its messages) is what the simulator checks, buckets or not: the run
    goes at that capacity and is refused at half of it; the parts add up."""
    graph, hierarchy = load_workload("resnet18"), Hierarchy((3, 2))
    for strategy in ("data", "hypar", "model"):
        plan = make_plan(graph, strategy, hierarchy, 12,
                         options=PlanOptions(("batch", "in", "out")))
        parts = dict(plan.footprint_parts)
        assert set(parts) == {"weights", "gradients", "optimizer_state", "activations",
                              "gathered_weights", "buffers"}
        assert parts["optimizer_state"] == 0  # sgd
        assert parts["weights"] == parts["gradients"] > 0
        assert plan.footprint_bytes == sum(parts.values())
        fits = load_hardware(overrides={"cube_capacity_gib": (plan.footprint_bytes + 1) / 2**30})
        for bucket_mb in (0, 25):
            simulate(graph, plan, fits, SimOptions(engine="analytic", bucket_mb=bucket_mb))
        short = load_hardware(overrides={"cube_capacity_gib": plan.footprint_bytes / 2**31})
        with pytest.raises(InputError, match="capacity: resnet18 needs"):
            simulate(graph, plan, short, SimOptions(engine="analytic", bucket_mb=0))


def test_graph_capacity_cli_is_one_line(cli):
    """`plan resnet50 --set cube_capacity_gib=0.01` was accepted: now one line, exit 2."""
    result = cli("plan", "resnet50", "--set", "cube_capacity_gib=0.01")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "the cube has 0.01 GiB" in result.stderr and "needs at least" in result.stderr


@settings(max_examples=30, deadline=None, derandomize=True)
@given(graph_name=st.sampled_from(["residual", "inception", "attention"]),
       strategy=st.sampled_from(["data", "model", "hypar", "trick", "tofu", "accpar"]),
       fraction=st.floats(0.2, 1.5), sizes=st.sampled_from([(2,), (2, 2), (3,)]))
def test_no_graph_plan_is_over_capacity(graph_name, strategy, fraction, sizes):
    """Any capacity, any strategy: a graph plan fits the cube (its footprint, which the run
    checks too) or the planner refuses it in one line naming the capacity."""
    from tests import test_graph_plan

    graph, hierarchy, batch = getattr(test_graph_plan, graph_name)(), Hierarchy(sizes), 12
    capacity = make_plan(graph, "data", hierarchy, batch).footprint_bytes * fraction
    config = load_hardware(overrides={"cube_capacity_gib": capacity / 2**30})
    try:
        plan = make_plan(graph, strategy, hierarchy, batch, options=PlanOptions(
            ("batch", "in", "out", "heads")), config=config)
    except InputError as exc:
        assert str(exc).startswith("capacity:") or "--kinds" in str(exc)
        assert "\n" not in str(exc)
        return
    assert plan.footprint_bytes <= config.cube_capacity_bytes
    simulate(graph, plan, config, SimOptions(engine="analytic"))  # the run accepts it
