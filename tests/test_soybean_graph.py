"""SoyBean on graph networks (hypar_sim.planner.soybean_graph): a chain written as a graph
gets the chain planner's plan, the cut's elimination is the brute-force minimum of its
tables, and branchy graphs plan and run."""

from __future__ import annotations

import pytest

import hypar_sim
from hypar_sim.partition import graph_layout
from hypar_sim.partition.graph_axes import sites
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.planner.graph_dp import every_assignment, minimise
from hypar_sim.planner.graph_plan import GraphRequest, make_graph_plan
from hypar_sim.planner.soybean import SOYBEAN_KINDS, plan_cost
from hypar_sim.planner.soybean_graph import _Cut
from hypar_sim.planner.strategies import make_plan
from hypar_sim.workload.graph import parse_graph
from hypar_sim.workload.network import parse_network

FCS = [{"type": "fc", "out_features": w} for w in (36, 5, 64, 12)]
CONVS = [{"type": "conv", "out_channels": 16, "kernel": 3, "padding": 1},
         {"type": "conv", "out_channels": 32, "kernel": 3, "padding": 1, "stride": 2},
         {"type": "fc", "out_features": 10}]
POOLED = [{"type": "conv", "out_channels": 8, "kernel": 3, "padding": 1,
           "pool": {"kernel": 2, "stride": 2}},
          {"type": "conv", "out_channels": 16, "kernel": 3, "pool": {"kernel": 2, "stride": 2}},
          {"type": "fc", "out_features": 12}, {"type": "fc", "out_features": 10}]


@pytest.mark.parametrize(("layers", "shape", "batch", "sizes"), [
    (FCS, [36], 36, (2, 2)), (FCS, [36], 8, (3, 2)), (FCS, [36], 64, (2, 2, 2, 2)),
    (CONVS, [3, 8, 8], 16, (2, 2, 2)), (CONVS, [3, 8, 8], 6, (3, 2)),
    (POOLED, [3, 16, 16], 16, (2, 2, 2)), (POOLED, [3, 16, 16], 64, (2, 2, 2, 2))])
def test_a_chain_as_a_graph_gets_the_chain_planners_plan(layers, shape, batch, sizes):
    """SoyBean's Algorithm 1 on the same chain written as `layers:` and as `nodes:`: every
    cut costs the same (Eq. 3, Theorem 1's delta_h), and the plans are the same, ties
    included (the 64-sample chain's third cut has two: the elimination tries the stored
    tilings in the chain DP's order, R, C, r, so both keep the same)."""
    first = {"features": shape[0]} if len(shape) == 1 else dict(
        zip(("channels", "height", "width"), shape, strict=True))
    chain = parse_network({"input": first, "layers": layers}, "chain")
    graph = parse_graph({"inputs": {"x": shape}, "nodes": [
        {**layer, "name": f"n{i}"} for i, layer in enumerate(layers)]}, "graph")
    hierarchy = Hierarchy(sizes)
    graphed = make_graph_plan(graph, "soybean", hierarchy, batch).columns
    chained = make_plan(chain, "soybean", hierarchy, batch).columns
    assert plan_cost(chain.layers, batch, graphed, hierarchy).deltas == \
        plan_cost(chain.layers, batch, chained, hierarchy).deltas
    assert graphed == chained


def test_one_cut_is_the_brute_force_minimum_of_its_tables():
    """A skip connection's top cut (fc, relu, their sum): the elimination's least cost is
    every assignment's."""
    graph = parse_graph({"inputs": {"x": [6]}, "nodes": [
        {"name": "a", "type": "fc", "out_features": 4},
        {"name": "r", "type": "act", "function": "relu"},
        {"name": "s", "type": "add", "inputs": ["a", "r"]}]}, "skip")
    hierarchy = Hierarchy((2, 2))
    request = GraphRequest(graph, sites(graph), 4, hierarchy, SOYBEAN_KINDS, "",
                           graph_layout.Costs(4, 4), [])
    cut = _Cut(request, [() for _ in graph.nodes], 0, SOYBEAN_KINDS)
    factors, order = cut.factors()
    domains = [size for i in range(len(graph.nodes))
               for size in (len(cut.options[i]), len(cut.tiles[i]))]
    assert minimise(domains, factors, order)[0] == pytest.approx(
        every_assignment(domains, factors)[0], rel=1e-12)


def test_soybean_plans_and_runs_a_transformer():
    plan = hypar_sim.plan("bert_base", "soybean", accelerators=4, batch=4)
    assert {kind for column in plan.columns for kind in column} <= set(SOYBEAN_KINDS)
    result = hypar_sim.simulate("bert_base", "soybean", accelerators=4, batch=4,
                                engine="analytic")
    assert result.traffic_bytes == pytest.approx(plan.traffic_bytes, rel=1e-12)
