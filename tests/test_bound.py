"""The lower bound on a chain's bytes (`planner.bound`, `plan --bound`): never above any plan,
tight on named cases."""

from __future__ import annotations

import json
from functools import partial

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hypar_sim.errors import InputError
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.planner.bound import node_bounds
from hypar_sim.planner.options import PlanOptions
from hypar_sim.planner.plan import make_plan
from hypar_sim.workload.layers import FeatureShape, make_conv
from hypar_sim.workload.network import Network, graph_of
from tests.conftest import run_cli
from tests.test_partition import mlp
from tests.test_planner_properties import networks


def test_tight_on_the_mlp_with_hypars_kinds():
    """Two fc layers 4096 -> 16384 -> 4096, batch 8, 2 accelerators, kinds batch and in:
    both layers split in; each layer's two partial holders must each receive its outputs
    (or their errors): 2 x 8 x 16384 + 2 x 8 x 4096 words, and that is what the plan
    moves. With out allowed the bound is 0 (out moves inputs, which it does not count)."""
    kinds = ("batch", "in")
    plan = make_plan(mlp(), "hypar", Hierarchy.binary(1), 8,
                     options=PlanOptions(kinds, "joint", "layout"))
    bounds = node_bounds(graph_of(mlp()), 8, Hierarchy.binary(1), kinds, 4)
    assert bounds == [2 * 8 * 16384 * 4, 2 * 8 * 4096 * 4]
    assert plan.columns == (("in",), ("in",)) and plan.traffic_bytes == sum(bounds) == 1_310_720
    assert node_bounds(graph_of(mlp()), 8, Hierarchy.binary(1), ("batch", "in", "out"), 4) == \
        [0.0, 0.0]


def test_tight_for_data_parallelism_on_two_accelerators():
    """A convolution with few weights and a large output: batch is the cheapest column;
    both replicas must receive every weight's partner gradient: 2 |W| words."""
    layer = make_conv("c", FeatureShape(8, 16, 16), 8, 3, padding=1)
    net = Network("one", layer.input, (layer,))
    plan = make_plan(net, "data", Hierarchy.binary(1), 4,
                     options=PlanOptions(("batch", "in"), "greedy", "layout"))
    (bound,) = node_bounds(graph_of(net), 4, Hierarchy.binary(1), ("batch", "in"), 4)
    assert bound == plan.traffic_bytes == 2 * 8 * 8 * 9 * 4


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(net=networks(max_layers=5), levels=st.integers(0, 3), batch=st.integers(1, 32),
       kinds=st.sets(st.sampled_from(["batch", "in", "out", "spatial"]), min_size=1),
       search=st.sampled_from(["greedy", "joint"]))
def test_no_plan_moves_less_than_the_bound(net, levels, batch, kinds, search):
    hierarchy = Hierarchy.binary(levels)
    kinds = tuple(k for k in ("batch", "in", "out", "spatial") if k in kinds)
    bound = sum(node_bounds(graph_of(net), batch, hierarchy, kinds, 4))
    try:
        plans = [make_plan(net, "hypar", hierarchy, batch,
                           options=PlanOptions(kinds, search, "layout"))]
        if kinds == ("batch",):  # data parallelism is a plan of these kinds only
            plans.append(make_plan(net, "data", hierarchy, batch,
                                   options=PlanOptions(kinds, search, "layout")))
    except InputError:
        return  # a layer no kind can split there: nothing to compare
    if set(kinds) <= {"batch", "in"} and batch % max(1, 2**levels) == 0:
        plans.append(make_plan(net, "hypar", hierarchy, batch,
                               options=PlanOptions(kinds, "greedy", "paper")))
    for plan in plans:
        assert plan.traffic_bytes >= bound * (1 - 1e-12)


def test_cli_prints_the_bound_and_the_ratio(tmp_path):
    cli = partial(run_cli, cwd=tmp_path)
    text = cli("plan", "vgg_a", "--bound")
    assert text.returncode == 0 and "the plan moves 2.01x the bound" in text.stdout
    data = json.loads(cli("plan", "sfc", "--bound", "--json").stdout)
    assert len(data["bound_bytes_per_node"]) == len(data["nodes"])
    assert data["traffic_bytes"] >= data["bound_bytes"] > 0
    graph = json.loads(cli("plan", "resnet18", "--bound", "--json", "--accelerators", "4").stdout)
    assert graph["traffic_bytes"] >= graph["bound_bytes"] > 0
    assert len(graph["bound_bytes_per_node"]) == len(graph["nodes"])
    assert pytest.approx(data["bound_bytes"]) == sum(data["bound_bytes_per_node"])


@pytest.mark.parametrize("name", ["residual", "inception", "attention", "mlp"])
@pytest.mark.parametrize("kinds", [("batch", "in"), ("batch", "in", "out", "heads", "groups")])
def test_graph_plans_are_never_below_the_bound(name, kinds):
    from hypar_sim.planner.bound import node_bounds
    from hypar_sim.planner.plan import plan_graph
    from tests import test_graph_plan as graphs

    graph = {"residual": graphs.residual, "inception": graphs.inception,
             "attention": graphs.attention, "mlp": graphs.mlp_graph}[name]()
    for hierarchy in (Hierarchy.binary(1), Hierarchy.binary(2), Hierarchy((3,))):
        for search in ("greedy", "joint"):
            try:
                plan = plan_graph(graph, "hypar", hierarchy, 6, kinds, search)
            except InputError:
                continue
            assert plan.traffic_bytes >= sum(node_bounds(graph, 6, hierarchy, kinds, 4)) * (
                1 - 1e-12)


def test_graph_bound_is_tight_on_the_token_mlp():
    from hypar_sim.planner.bound import node_bounds
    from hypar_sim.planner.plan import plan_graph
    from tests.test_graph_plan import mlp_graph

    graph, hierarchy = mlp_graph(), Hierarchy.binary(1)
    plan = plan_graph(graph, "hypar", hierarchy, 8, ("batch", "in"), "joint")
    assert plan.traffic_bytes == sum(node_bounds(graph, 8, hierarchy, ("batch", "in"), 4)) \
        == 1_310_720


SEARCHING = ("optimal", "soybean", "tofu", "accpar", "grid")


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(net=networks(max_layers=4), hierarchy=st.sampled_from([(), (2,), (2, 2), (3, 2), (2, 2, 2)]),
       batch=st.integers(1, 24),
       kinds=st.sets(st.sampled_from(["batch", "in", "out", "spatial"]), min_size=1),
       strategy=st.sampled_from(SEARCHING))
def test_no_strategy_moves_less_than_the_bound(net, hierarchy, batch, kinds, strategy):
    """Every planner (the seed papers' too, each with its own cost), given kinds: its plan's
    bytes (the layout model's) are at least the bound for those kinds."""
    hierarchy = Hierarchy(hierarchy)
    kinds = tuple(k for k in ("batch", "in", "out", "spatial") if k in kinds)
    graph = graph_of(net)
    bound = sum(node_bounds(graph, batch, hierarchy, kinds, 4))
    try:
        plan = make_plan(graph, strategy, hierarchy, batch,
                         options=PlanOptions(kinds, "greedy", "layout"))
    except InputError:
        return  # no kind of these splits some layer, or the strategy takes none of them
    assert plan.traffic_bytes >= bound * (1 - 1e-12)
