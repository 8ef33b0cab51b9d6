"""The graph `tofu` strategy: Tofu's coarsening (Sec 5.1), per-step exact search and recursion
(Sec 5.2) on graph networks (EuroSys 2019)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest

from hypar_sim.errors import InputError
from hypar_sim.hardware.config import load_hardware
from hypar_sim.partition import graph_layout
from hypar_sim.partition.graph_axes import sites
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.shares import Column
from hypar_sim.planner import tofu, tofu_graph
from hypar_sim.planner.graph_plan import (
    make_graph_plan,
    plan_graph,
)
from hypar_sim.planner.plan_messages import graph_edges
from hypar_sim.planner.strategies import STRATEGIES, PlanOptions
from hypar_sim.runner import SimOptions, simulate
from hypar_sim.workload.graph import Graph, parse_graph
from hypar_sim.workload.layers import FeatureShape, Pool, make_conv, make_fc
from hypar_sim.workload.network import load_workload

ONE = Hierarchy((2,))


def _names(graph: Graph, coarse: tofu_graph.Coarse) -> list[list[str]]:
    return [[graph.nodes[i].name for i in unit] for unit in coarse.units]


def downsample_block() -> Graph:
    """A stem (conv, bn, relu) and a residual block whose skip is a strided 1x1 conv and
    its bn, joined by an add and a relu, then a classifier."""
    conv = {"type": "conv", "out_channels": 8, "kernel": 3, "padding": 1}
    return parse_graph({"inputs": {"x": [4, 8, 8]}, "nodes": [
        {"name": "c0", **conv}, {"name": "bn0", "type": "batch_norm"},
        {"name": "r0", "type": "act", "function": "relu"},
        {"name": "c1", **conv, "stride": 2}, {"name": "bn1", "type": "batch_norm"},
        {"name": "r1", "type": "act", "function": "relu"},
        {"name": "c2", **conv}, {"name": "bn2", "type": "batch_norm"},
        {"name": "down", "type": "conv", "out_channels": 8, "kernel": 1, "stride": 2,
         "inputs": ["r0"]},
        {"name": "down_bn", "type": "batch_norm"},
        {"name": "add", "type": "add", "inputs": ["bn2", "down_bn"]},
        {"name": "r2", "type": "act", "function": "relu"},
        {"name": "fc", "type": "fc", "out_features": 10}]}, "block")


def test_registered() -> None:
    assert STRATEGIES["tofu"].graph is tofu_graph._tofu


def test_coarsening_of_a_residual_block() -> None:
    """By hand: every conv and the fc is a unit of its own (a group of its forward and
    backward operators); consecutive element-wise nodes coalesce: bn0 and r0, bn1 and
    r1, and bn2, the add (bn2, its first input, is element-wise and read by the add
    alone) and r2; down_bn follows a conv, so it stays alone. Units in topological order
    of their last node. The block is a fork-join: (bn0, r0) feeds c1 and down, and
    both branches join in (bn2, add, r2)."""
    graph = downsample_block()
    coarse = tofu_graph.coarsen(graph)
    assert _names(graph, coarse) == [["c0"], ["bn0", "r0"], ["c1"], ["bn1", "r1"], ["c2"],
                                     ["down"], ["down_bn"], ["bn2", "add", "r2"], ["fc"]]
    unit_edges = {(coarse.unit_of[p], coarse.unit_of[c]) for p, c, _ in
                  graph_edges(graph) if coarse.unit_of[p] != coarse.unit_of[c]}
    assert unit_edges == {(0, 1), (1, 2), (1, 5), (2, 3), (3, 4), (4, 7), (5, 6), (6, 7),
                          (7, 8)}


def test_elementwise_after_a_fork() -> None:
    """Two activations read the same conv output: each starts a unit (a conv is not
    element-wise); the add joins the first of its inputs, both element-wise and read by
    it alone."""
    graph = parse_graph({"inputs": {"x": [2, 4, 4]}, "nodes": [
        {"name": "c0", "type": "conv", "out_channels": 2, "kernel": 1},
        {"name": "a", "type": "act", "function": "relu", "inputs": ["c0"]},
        {"name": "b", "type": "act", "function": "tanh", "inputs": ["c0"]},
        {"name": "s", "type": "add", "inputs": ["a", "b"]}]}, "fork")
    assert _names(graph, tofu_graph.coarsen(graph)) == [["c0"], ["b"], ["a", "s"]]


def _two_fc(fork: bool = False) -> Graph:
    nodes = [{"name": "fc_a", "type": "fc", "out_features": 64},
             {"name": "fc_b", "type": "fc", "out_features": 4, "inputs": ["fc_a"]}]
    if fork:
        nodes += [{"name": "fc_c", "type": "fc", "out_features": 4, "inputs": ["fc_a"]},
                  {"name": "cat", "type": "concat", "inputs": ["fc_b", "fc_c"]}]
    return parse_graph({"inputs": {"x": [4]}, "nodes": nodes}, "two_fc")


def test_hand_worked_costs_and_a_tensor_read_twice() -> None:
    """fc 4 -> 64 (|W_a| = 256, first: no backward-data) then fc 64 -> 4 (|W_b| = 256), batch
    8, two workers, word 1. Batch everywhere: 2 |W_a| + 3 |W_b| = 1280 (no replicas: the
    forward and backward-data operators fetch W, dW is reduced). fc_b by in: its input
    F (8 x 64 = 512) moves |F|/2 forward and |E|/2 backward, 512; its weights nothing;
    the loss reduces the partial output O (32) once, |O|, and the in layer's two
    backward operators each fetch the half of E' they lack, 2 |O|: 1120 (the chain's
    costs, `planner.tofu`). With a second reader fc_c of fc_a's output (a fork), the
    batch -> in conversion is charged on each reading edge: 512 elements each."""
    graph = _two_fc()
    assert tofu_graph.plan_costs(graph, 8, [("batch",), ("batch",)], ONE, 1) == (1280.0,)
    assert tofu_graph.plan_costs(graph, 8, [("batch",), ("in",)], ONE, 1) == (1120.0,)
    a = make_fc("fc_a", FeatureShape(4, 1, 1), 64)
    chain = [a, make_fc("fc_b", a.output, 4)]
    assert tofu.plan_costs(chain, 8, [("batch",), ("in",)], ONE, 1) == (1120.0,)
    costs = tofu_graph.TofuCosts(_two_fc(fork=True), 8, (2,), 1)
    assert costs.edge(0, 1, 0, ("batch",), ("in",)) == costs.edge(0, 2, 0, ("batch",),
                                                                   ("in",)) == 512.0


@pytest.mark.parametrize("pooled", [False, True])
def test_one_step_costs_match_the_chain_version(pooled: bool) -> None:
    """conv 3 -> 4 then conv 4 -> 8 (3x3, pad 1, 8x8, batch 8) as a graph: at one step on two
    workers the graph costs equal `planner.tofu`'s for all 16 plans of Tofu's kinds
    (halo rows, partial sums, weights, the loss), also with each conv's 2x2 pooling folded
    in (an in split reduces the pre-pooling output: 4x the elements)."""
    pool = {"pool": {"kernel": 2, "stride": 2}} if pooled else {}
    graph = parse_graph({"inputs": {"x": [3, 8, 8]}, "nodes": [
        {"name": "conv1", "type": "conv", "out_channels": 4, "kernel": 3, "padding": 1, **pool},
        {"name": "conv2", "type": "conv", "out_channels": 8, "kernel": 3, "padding": 1,
         **pool}]}, "two_conv")
    stage = Pool(2, 2) if pooled else None
    conv1 = make_conv("conv1", FeatureShape(3, 8, 8), 4, 3, 1, 1, stage)
    chain = [conv1, make_conv("conv2", conv1.output, 8, 3, 1, 1, stage)]
    for plan in itertools.product([(k,) for k in tofu.TOFU_KINDS], repeat=2):
        assert tofu_graph.plan_costs(graph, 8, plan, ONE, 1) == tofu.plan_costs(
            chain, 8, plan, ONE, 1), plan


def two_branches() -> Graph:
    """A stem conv read by two branch convs (3x3 and 1x1) joined by an add: four units, a
    fork-join."""
    return parse_graph({"inputs": {"x": [4, 4, 4]}, "nodes": [
        {"name": "c0", "type": "conv", "out_channels": 8, "kernel": 3, "padding": 1},
        {"name": "c1", "type": "conv", "out_channels": 8, "kernel": 3, "padding": 1,
         "inputs": ["c0"]},
        {"name": "c2", "type": "conv", "out_channels": 8, "kernel": 1, "inputs": ["c0"]},
        {"name": "add", "type": "add", "inputs": ["c1", "c2"]}]}, "two_branches")


def _unit_plans(graph: Graph, batch: int, hierarchy: Hierarchy,
                kinds: Sequence[str]) -> list[list[Column]]:
    """Every plan of the coarsened search space: a column per unit, every level's kind one
    that the unit takes there (`unit_options`), as node columns."""
    coarse = tofu_graph.coarsen(graph)
    costs = tofu_graph.TofuCosts(graph, batch, hierarchy.sizes, 4)

    def columns(members: Sequence[int], prefix: Column) -> list[Column]:
        if len(prefix) == hierarchy.levels:
            return [prefix]
        return [c for kind in tofu_graph.unit_options(costs, members, prefix, kinds)
                for c in columns(members, prefix + (kind,))]

    per_unit = [columns(members, ()) for members in coarse.units]
    return [[choice[u] for u in coarse.unit_of] for choice in itertools.product(*per_unit)]


@pytest.mark.parametrize("sizes", [(2,), (4,)])
def test_search_is_brute_force_argmin(sizes: tuple[int, ...]) -> None:
    """On one step (2 or 4 members) the exact elimination over the fork-join finds the least
    Tofu cost of every plan of the coarsened graph: Tofu's 4 kinds for each conv, 3
    distinct splits for the add (in and out both split its channels): 192 plans. The
    plan pairs c0 by out with the 3x3 c1 by in (c1 reads c0's channels where they are
    made, and only its partial output is reduced), while the cheap 1x1 branch c2 and
    the add stay batch."""
    graph, hierarchy = two_branches(), Hierarchy(sizes)
    costs = tofu_graph.TofuCosts(graph, 4, sizes, 4)
    plans = _unit_plans(graph, 4, hierarchy, tofu.TOFU_KINDS)
    assert len(plans) == 192
    totals = [sum(tofu_graph.plan_costs(graph, 4, p, hierarchy, 4, costs)) for p in plans]
    found = tofu_graph.recursive_search(graph, 4, hierarchy, tofu.TOFU_KINDS)
    assert found == [("out",), ("in",), ("batch",), ("batch",)]
    assert sum(tofu_graph.plan_costs(graph, 4, found, hierarchy, 4, costs)) == min(totals)


def test_each_step_is_exact_on_two_levels() -> None:
    """2 x 2 members, kinds batch, in, out: delta_1 is the least over every first-step plan,
    delta_2 the least over every second step given the first (Tofu Sec 5.2), and here
    the recursion's total is the least of all 2916 two-level plans."""
    graph, hierarchy, kinds = two_branches(), Hierarchy((2, 2)), ("batch", "in", "out")
    costs = tofu_graph.TofuCosts(graph, 4, hierarchy.sizes, 4)
    found = tofu_graph.recursive_search(graph, 4, hierarchy, kinds)
    deltas = tofu_graph.plan_costs(graph, 4, found, hierarchy, 4, costs)
    plans = _unit_plans(graph, 4, hierarchy, kinds)
    assert len(plans) == 2916
    every = {tuple(p): tofu_graph.plan_costs(graph, 4, p, hierarchy, 4, costs) for p in plans}
    assert deltas[0] == min(d[0] for d in every.values())
    same_start = [d for p, d in every.items() if [c[:1] for c in p] == [c[:1] for c in found]]
    assert deltas[1] == min(d[1] for d in same_start)
    assert found == [("out", "out"), ("in", "out"), ("batch", "batch"), ("batch", "batch")]
    assert sum(deltas) == pytest.approx(min(map(sum, every.values())), rel=1e-12)


def _offered_everywhere(graph: Graph, batch: int, hierarchy: Hierarchy,
                        columns: Sequence[Column]) -> bool:
    return all(graph_layout.offered(site, batch, column, hierarchy)
               for site, column in zip(sites(graph), columns, strict=True))


def test_resnet18_plans_and_runs() -> None:
    """16 accelerators, batch 64, Tofu's kinds: every node's column is offered, every unit's
    nodes share it, and the analytic engine runs the plan with the planner's bytes."""
    graph, hierarchy = load_workload("resnet18"), Hierarchy.for_count(16)
    plan = make_graph_plan(graph, "tofu", hierarchy, 64)
    assert _offered_everywhere(graph, 64, hierarchy, plan.columns)
    coarse = tofu_graph.coarsen(graph)
    assert all(len({plan.columns[i] for i in unit}) == 1 for unit in coarse.units)
    assert {k for column in plan.columns for k in column} <= set(tofu.TOFU_KINDS)
    hw = load_hardware()
    result = simulate(graph, plan, hw, SimOptions(engine="analytic"))
    assert result.traffic_bytes == pytest.approx(plan.traffic_bytes, rel=1e-12)
    assert result.latency_cycles > 0 and result.strategy == "tofu"


def test_plan_differs_from_hypar() -> None:
    """The two fcs as a graph, kinds batch and in, two accelerators. HyPar replicates
    weights: fc_b by batch costs an all-reduce, 2 |W| = 512 elements, less than by in
    (|F| = 512 converted, 64 for the loss), so it keeps batch. Tofu keeps one copy of
    every tensor (Sec 9, and Sec 5's "1/k" of every tensor per worker): batch costs
    3 |W| = 768 there, in 608, so it splits fc_b by in. The layout model (HyPar's cost)
    then charges Tofu's plan 4352 bytes and HyPar's 4096."""
    graph = _two_fc()
    mine, hypar = (plan_graph(graph, name, ONE, 8, ("batch", "in")) for name in ("tofu", "hypar"))
    assert mine.columns == (("batch",), ("in",)) and hypar.columns == (("batch",), ("batch",))
    assert (mine.traffic_bytes, hypar.traffic_bytes) == (4352.0, 4096.0)


def test_units_share_a_column() -> None:
    """Tofu coalesces consecutive element-wise operators (Sec 5.1): on resnet18 the last
    stage's first residual add and the relu after it are one unit and take one column in
    Tofu's plan (HyPar's costs may split them; since a tensor read alike by several
    consumers moves once, its plan at 16 accelerators no longer does)."""
    graph, hierarchy = load_workload("resnet18"), Hierarchy.for_count(16)
    names = [node.name for node in graph.nodes]
    add, relu = names.index("s5b1_add"), names.index("s5b1_relu")
    coarse = tofu_graph.coarsen(graph)
    assert coarse.unit_of[add] == coarse.unit_of[relu]
    plan = make_graph_plan(graph, "tofu", hierarchy, 256,
                           options=PlanOptions(kinds=("batch", "in")))
    for unit in coarse.units:
        assert len({plan.columns[i] for i in unit}) == 1


def test_kinds_honoured() -> None:
    assert tofu_graph.graph_kinds(("in", "heads", "batch")) == ("batch", "in", "heads")
    with pytest.raises(InputError, match="--kinds: strategy tofu takes only"):
        tofu_graph.graph_kinds(("seq_unknown",))
    plan = plan_graph(downsample_block(), "tofu", Hierarchy((2, 2)), 4, ("batch", "out"))
    assert {k for column in plan.columns for k in column} <= {"batch", "out"}
    with pytest.raises(InputError, match="--kinds: no kind of batch can split node c0"):
        plan_graph(downsample_block(), "tofu", Hierarchy((2, 2, 2)), 4, ("batch",))
