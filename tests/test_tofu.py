"""The `tofu` strategy: Tofu's partition-n-reduce costs, its coarsening (Sec 5.1), per-step
exact search and recursion (Sec 5.2) (EuroSys 2019); chains are written as graphs
(`graph_of`)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest

from hypar_sim.errors import InputError
from hypar_sim.hardware.config import load_hardware
from hypar_sim.partition import node_layout
from hypar_sim.partition.axes import sites
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.shares import Column
from hypar_sim.planner import tofu
from hypar_sim.planner.options import PlanOptions
from hypar_sim.planner.plan import make_plan, plan_graph
from hypar_sim.planner.plan_messages import graph_edges
from hypar_sim.planner.strategies import STRATEGIES
from hypar_sim.runner import SimOptions, simulate
from hypar_sim.workload.graph import Graph, parse_graph
from hypar_sim.workload.layers import FeatureShape, Layer, Pool, make_conv, make_fc
from hypar_sim.workload.network import Network, graph_of, load_workload

ONE = Hierarchy((2,))


def _graph(*layers: Layer) -> Graph:
    return graph_of(Network("test", layers[0].input, tuple(layers)))


def _names(graph: Graph, coarse: tofu.Coarse) -> list[list[str]]:
    return [[graph.nodes[i].name for i in unit] for unit in coarse.units]


def _unit_plans(graph: Graph, batch: int, hierarchy: Hierarchy,
                kinds: Sequence[str]) -> list[list[Column]]:
    """Every plan of the coarsened search space: a column per unit, every level's kind one
    that the unit takes there (`unit_options`), as node columns."""
    coarse = tofu.coarsen(graph)
    costs = tofu.TofuCosts(graph, batch, hierarchy.sizes, 4)

    def columns(members: Sequence[int], prefix: Column) -> list[Column]:
        if len(prefix) == hierarchy.levels:
            return [prefix]
        return [c for kind in tofu.unit_options(costs, members, prefix, kinds)
                for c in columns(members, prefix + (kind,))]

    per_unit = [columns(members, ()) for members in coarse.units]
    return [[choice[u] for u in coarse.unit_of] for choice in itertools.product(*per_unit)]


def test_registered() -> None:
    """The module registers the strategy itself, with its paper's kinds and cost."""
    spec = STRATEGIES["tofu"]
    assert spec.searches and spec.columns is tofu.tofu_columns
    assert spec.default_kinds == ("batch", "in", "out", "spatial")
    assert spec.own_cost == "its bytes"


def test_weight_cost_by_kind() -> None:
    """conv 4 -> 8 channels, 3x3: |W| = 288 elements. A batch or spatial worker reads all of W
    in the forward and backward-data operators and writes partial dW: 3 (k-1) |W| (2 (k-1)
    |W| for the first layer, which has no backward-data operator); out and in split W."""
    site = sites(_graph(make_conv("conv", FeatureShape(4, 8, 8), 8, 3, 1, 1)))[0]

    def cost(kind: str, batch: int, parts: int, first: bool) -> float:
        team = tofu.workers(site, batch, (kind,), (parts,))
        return tofu.node_cost(site, (not first,), False, team, parts)

    assert [cost(kind, 2, 2, False) for kind in tofu.TOFU_KINDS] == [864.0, 0.0, 0.0, 864.0]
    assert cost("batch", 6, 3, False) == 3 * 2 * 288
    assert cost("batch", 2, 2, True) == 2 * 288


def test_batch_to_in_boundary_is_hypars_table_2() -> None:
    """fc 4 -> 64 (batch) then fc 64 -> 4 (in), batch 8, two workers: F = 8 x 64 = 512
    elements. Forward: F partitioned on channels, each owner fetches the other's samples
    of its channels, 2 x 128 = |F|/2, and both operators of the in layer read their own
    part; backward the same for E: |F|/2 + |E|/2, HyPar's 2 (0.25 A(F) + 0.25 A(E))."""
    costs = tofu.TofuCosts(_two_fc(), 8, (2,), 1)
    assert costs.edge(0, 1, 0, ("batch",), ("in",)) == 512.0
    assert costs.edge(0, 1, 0, ("batch",), ("batch",)) == 0.0


def test_spatial_halo_hand_worked() -> None:
    """conv1 (3 -> 4, 3x3 pad 1, 8x8) then conv2 (4 -> 8, same), batch 2, both split by
    rows on two workers. A row of conv1's output is 2 x 4 x 8 = 64 elements. Forward:
    conv2's workers read rows [0, 5) and [3, 8), one halo row each beyond their half,
    for the forward and weight-gradient operators: 2 x 2 x 64 = 256. Backward: conv2's
    input errors overlap on rows 3 and 4 (partial sums), one row fetched by each owner:
    128. Weights: conv1 (first) 2 |W1| = 216, conv2 3 |W2| = 864. The loss takes conv2's
    rows where they are: 0. Total 1464 elements."""
    conv1 = make_conv("conv1", FeatureShape(3, 8, 8), 4, 3, 1, 1)
    graph = _graph(conv1, make_conv("conv2", conv1.output, 8, 3, 1, 1))
    costs = tofu.TofuCosts(graph, 2, (2,), 1)
    assert costs.edge(0, 1, 0, ("spatial",), ("spatial",)) == 384.0
    assert tofu.plan_costs(graph, 2, [("spatial",), ("spatial",)], ONE, 1) == (1464.0,)


def test_in_split_loss_after_pooling() -> None:
    """An in-split last layer (8 x 4 x 4 pooled from 8 x 8 x 8, batch 2: |O| = 256), after
    another: the partial sums are reduced before 2x2 pooling, (k-1) 4 |O| = 1024, and its
    two backward operators read all of the error, 2 (k-1) |O| = 512; its weights, split by
    C, move nothing. A first layer has one backward operator: 1024 + 256."""
    stem = make_conv("stem", FeatureShape(4, 8, 8), 4, 3, 1, 1)
    pooled = make_conv("conv", stem.output, 8, 3, 1, 1, Pool(2, 2))
    assert tofu.TofuCosts(_graph(stem, pooled), 2, (2,), 1).node(1, ("in",)) == 1536.0
    assert tofu.TofuCosts(_graph(pooled), 2, (2,), 1).node(0, ("in",)) == 1280.0


def test_step_cost_times_groups() -> None:
    """fc 16 -> 8 (|W| = 128) alone, batch 8, 2 x 2 workers. Batch then batch: step 1 costs
    2 |W| (the first layer: forward reads, dW reduced); step 2 the same on each of the two
    groups, whose share still has all of W. Batch and out commute (Tofu's insight behind
    Theorem 1): either order costs 2 |W| in all."""
    graph, two = _graph(make_fc("fc", FeatureShape(16, 1, 1), 8)), Hierarchy((2, 2))
    assert tofu.plan_costs(graph, 8, [("batch", "batch")], two, 4) == (1024.0, 2048.0)
    assert tofu.plan_costs(graph, 8, [("batch", "out")], two, 4) == (1024.0, 0.0)
    assert tofu.plan_costs(graph, 8, [("out", "batch")], two, 4) == (0.0, 1024.0)


def _pooled_chain() -> Graph:
    conv1 = make_conv("conv1", FeatureShape(3, 16, 16), 16, 3, 1, 1, Pool(2, 2))
    conv2 = make_conv("conv2", conv1.output, 32, 3, 1, 1, Pool(2, 2))
    return _graph(conv1, conv2, make_fc("fc", conv2.output, 10))


def _wide_chain() -> Graph:
    conv1 = make_conv("conv1", FeatureShape(16, 32, 32), 16, 3, 1, 1)
    conv2 = make_conv("conv2", conv1.output, 16, 3, 1, 1, Pool(2, 2))
    return _graph(conv1, conv2, make_fc("fc", conv2.output, 256))


@pytest.mark.parametrize(("chain", "batch", "sizes", "expected"), [
    (_pooled_chain, 8, (2, 2), [("batch", "out"), ("batch", "in"), ("in", "in")]),
    (_pooled_chain, 8, (3, 2), [("batch", "out"), ("batch", "in"), ("in", "in")]),
    (_wide_chain, 2, (2, 2), [("batch", "spatial"), ("batch", "spatial"), ("in", "in")]),
])
def test_chain_search_is_brute_force_argmin(chain, batch: int, sizes: tuple[int, ...],
                                            expected: list[Column]) -> None:
    """On these 3-layer chains at two levels, all four kinds, the recursion's plan has the
    least sum of delta_i over every plan (1800 to 2160 of them)."""
    graph, hierarchy = chain(), Hierarchy(sizes)
    costs = tofu.TofuCosts(graph, batch, sizes, 4)
    plan = tofu.recursive_search(graph, batch, hierarchy, tofu.TOFU_KINDS)
    assert plan == expected
    plans = _unit_plans(graph, batch, hierarchy, tofu.TOFU_KINDS)
    assert 1800 <= len(plans) <= 2160
    best = min(sum(tofu.plan_costs(graph, batch, p, hierarchy, 4, costs)) for p in plans)
    assert sum(tofu.plan_costs(graph, batch, plan, hierarchy, 4, costs)) == pytest.approx(
        best, rel=1e-12)


def test_each_step_exact_but_recursion_not_always_optimal() -> None:
    """Each step's search is exact: delta_1 is the least over all first-step plans, delta_2
    the least given step 1. But Theorem 1's proof needs steps whose costs commute, and here
    a split's cost depends on the steps before it. The convs take batch at both levels.
    For fc, the batch -> in conversion of its input and the loss cost 12480 elements at
    step 1, and only 6528 (both groups) at step 2 after a first in step: half of what each
    group's workers read came from the other group at step 1 and is partitioned among
    them as it arrives. fc's weights cost 9216 under batch at either step. Step 1 sees
    only its own cost and picks batch for fc (9216 < 12480); the best second step is then
    in, 125760 bytes in all; the dearer start, in then in, costs 115008 (the recursion's
    plan costs 9% more)."""
    conv1 = make_conv("conv1", FeatureShape(16, 12, 16), 4, 5, 1, 2)
    conv2 = make_conv("conv2", conv1.output, 4, 1)
    graph = _graph(conv1, conv2, make_fc("fc", conv2.output, 4))
    hierarchy, kinds = Hierarchy((2, 2)), ("batch", "in")
    costs = tofu.TofuCosts(graph, 16, hierarchy.sizes, 4)

    def deltas_of(plan: Sequence[Column]) -> tuple[float, ...]:
        return tofu.plan_costs(graph, 16, plan, hierarchy, 4, costs)

    plan = tofu.recursive_search(graph, 16, hierarchy, kinds)
    assert plan == [("batch", "batch"), ("batch", "batch"), ("batch", "in")]
    deltas = deltas_of(plan)
    assert deltas == (49856.0, 75904.0)
    every = {tuple(p): deltas_of(p) for p in _unit_plans(graph, 16, hierarchy, kinds)}
    assert deltas[0] == min(d[0] for d in every.values())
    same_start = [d for p, d in every.items() if [c[:1] for c in p] == [c[:1] for c in plan]]
    assert deltas[1] == min(d[1] for d in same_start)
    best = min(every, key=lambda p: sum(every[p]))
    assert best == (("batch", "batch"), ("batch", "batch"), ("in", "in"))
    assert sum(every[best]) == 115008.0 < sum(deltas) == 125760.0


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


def test_coarsening_of_a_residual_block() -> None:
    """By hand: every conv and the fc is a unit of its own (a group of its forward and
    backward operators); consecutive element-wise nodes coalesce: bn0 and r0, bn1 and
    r1, and bn2, the add (bn2, its first input, is element-wise and read by the add
    alone) and r2; down_bn follows a conv, so it stays alone. Units in topological order
    of their last node. The block is a fork-join: (bn0, r0) feeds c1 and down, and
    both branches join in (bn2, add, r2)."""
    graph = downsample_block()
    coarse = tofu.coarsen(graph)
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
    assert _names(graph, tofu.coarsen(graph)) == [["c0"], ["b"], ["a", "s"]]


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
    backward operators each fetch the half of E' they lack, 2 |O|: 1120. With a second
    reader fc_c of fc_a's output (a fork), the batch -> in conversion is charged on each
    reading edge: 512 elements each."""
    graph = _two_fc()
    assert tofu.plan_costs(graph, 8, [("batch",), ("batch",)], ONE, 1) == (1280.0,)
    assert tofu.plan_costs(graph, 8, [("batch",), ("in",)], ONE, 1) == (1120.0,)
    costs = tofu.TofuCosts(_two_fc(fork=True), 8, (2,), 1)
    assert costs.edge(0, 1, 0, ("batch",), ("in",)) == costs.edge(0, 2, 0, ("batch",),
                                                                   ("in",)) == 512.0


def two_branches() -> Graph:
    """A stem conv read by two branch convs (3x3 and 1x1) joined by an add: four units, a
    fork-join."""
    return parse_graph({"inputs": {"x": [4, 4, 4]}, "nodes": [
        {"name": "c0", "type": "conv", "out_channels": 8, "kernel": 3, "padding": 1},
        {"name": "c1", "type": "conv", "out_channels": 8, "kernel": 3, "padding": 1,
         "inputs": ["c0"]},
        {"name": "c2", "type": "conv", "out_channels": 8, "kernel": 1, "inputs": ["c0"]},
        {"name": "add", "type": "add", "inputs": ["c1", "c2"]}]}, "two_branches")


@pytest.mark.parametrize("sizes", [(2,), (4,)])
def test_search_is_brute_force_argmin(sizes: tuple[int, ...]) -> None:
    """On one step (2 or 4 members) the exact elimination over the fork-join finds the least
    Tofu cost of every plan of the coarsened graph: Tofu's 4 kinds for each conv, 3
    distinct splits for the add (in and out both split its channels): 192 plans. The
    plan pairs c0 by out with the 3x3 c1 by in (c1 reads c0's channels where they are
    made, and only its partial output is reduced), while the cheap 1x1 branch c2 and
    the add stay batch."""
    graph, hierarchy = two_branches(), Hierarchy(sizes)
    costs = tofu.TofuCosts(graph, 4, sizes, 4)
    plans = _unit_plans(graph, 4, hierarchy, tofu.TOFU_KINDS)
    assert len(plans) == 192
    totals = [sum(tofu.plan_costs(graph, 4, p, hierarchy, 4, costs)) for p in plans]
    found = tofu.recursive_search(graph, 4, hierarchy, tofu.TOFU_KINDS)
    assert found == [("out",), ("in",), ("batch",), ("batch",)]
    assert sum(tofu.plan_costs(graph, 4, found, hierarchy, 4, costs)) == min(totals)


def test_each_step_is_exact_on_two_levels() -> None:
    """2 x 2 members, kinds batch, in, out: delta_1 is the least over every first-step plan,
    delta_2 the least over every second step given the first (Tofu Sec 5.2), and here
    the recursion's total is the least of all 2916 two-level plans."""
    graph, hierarchy, kinds = two_branches(), Hierarchy((2, 2)), ("batch", "in", "out")
    costs = tofu.TofuCosts(graph, 4, hierarchy.sizes, 4)
    found = tofu.recursive_search(graph, 4, hierarchy, kinds)
    deltas = tofu.plan_costs(graph, 4, found, hierarchy, 4, costs)
    plans = _unit_plans(graph, 4, hierarchy, kinds)
    assert len(plans) == 2916
    every = {tuple(p): tofu.plan_costs(graph, 4, p, hierarchy, 4, costs) for p in plans}
    assert deltas[0] == min(d[0] for d in every.values())
    same_start = [d for p, d in every.items() if [c[:1] for c in p] == [c[:1] for c in found]]
    assert deltas[1] == min(d[1] for d in same_start)
    assert found == [("out", "out"), ("in", "out"), ("batch", "batch"), ("batch", "batch")]
    assert sum(deltas) == pytest.approx(min(map(sum, every.values())), rel=1e-12)


def _offered_everywhere(graph: Graph, batch: int, hierarchy: Hierarchy,
                        columns: Sequence[Column]) -> bool:
    return all(node_layout.offered(site, batch, column, hierarchy)
               for site, column in zip(sites(graph), columns, strict=True))


@pytest.mark.parametrize("sizes", [(3, 2), (3, 2, 2), (5,), (2, 3)])
def test_any_hierarchy(sizes: tuple[int, ...]) -> None:
    """One recursion step per level, top first, any level sizes; the plan is a column of
    Tofu's kinds per layer that the layout offers (cifar_c's first conv has 3 input
    channels: never split 5 ways by in)."""
    graph, hierarchy = load_workload("cifar_c"), Hierarchy(sizes)
    plan = make_plan(graph, "tofu", hierarchy, 100)
    assert all(len(column) == len(sizes) and set(column) <= set(tofu.TOFU_KINDS)
               for column in plan.columns)
    assert _offered_everywhere(graph, 100, hierarchy, plan.columns)
    assert plan.traffic_bytes > 0
    assert len(tofu.plan_costs(graph, 100, plan.columns, hierarchy, 4)) == len(sizes)


def test_resnet18_plans_and_runs() -> None:
    """16 accelerators, batch 64, Tofu's kinds: every node's column is offered, every unit's
    nodes share it, and the analytic engine runs the plan with the planner's bytes."""
    graph, hierarchy = load_workload("resnet18"), Hierarchy.for_count(16)
    plan = make_plan(graph, "tofu", hierarchy, 64)
    assert _offered_everywhere(graph, 64, hierarchy, plan.columns)
    coarse = tofu.coarsen(graph)
    assert all(len({plan.columns[i] for i in unit}) == 1 for unit in coarse.units)
    assert {k for column in plan.columns for k in column} <= set(tofu.TOFU_KINDS)
    hw = load_hardware()
    result = simulate(graph, plan, hw, SimOptions(engine="analytic"))
    assert result.traffic_bytes == pytest.approx(plan.traffic_bytes, rel=1e-12)
    assert result.latency_cycles > 0 and result.strategy == "tofu"


def test_plan_differs_from_hypar() -> None:
    """The two fcs, kinds batch and in, two accelerators. HyPar replicates weights: fc_b by
    batch costs an all-reduce, 2 |W| = 512 elements, less than by in (|F| = 512 converted,
    64 for the loss), so it keeps batch. Tofu keeps one copy of every tensor (Sec 9, and
    Sec 5's "1/k" of every tensor per worker): batch costs 3 |W| = 768 there, in |F| + 3 |O|
    = 608 (the in layer's two backward operators each read the whole error), so it splits
    fc_b by in. The layout model (HyPar's cost) then charges Tofu's plan 4352 bytes and
    HyPar's 4096."""
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
    coarse = tofu.coarsen(graph)
    assert coarse.unit_of[add] == coarse.unit_of[relu]
    plan = make_plan(graph, "tofu", hierarchy, 256,
                     options=PlanOptions(kinds=("batch", "in")))
    for unit in coarse.units:
        assert len({plan.columns[i] for i in unit}) == 1


def test_kinds_honoured() -> None:
    assert tofu.allowed_kinds(("in", "heads", "batch")) == ("batch", "in", "heads")
    with pytest.raises(InputError, match="--kinds: strategy tofu takes only"):
        tofu.allowed_kinds(("seq_unknown",))
    plan = plan_graph(downsample_block(), "tofu", Hierarchy((2, 2)), 4, ("batch", "out"))
    assert {k for column in plan.columns for k in column} <= {"batch", "out"}
    with pytest.raises(InputError, match="--kinds: no kind of batch can split node c0"):
        plan_graph(downsample_block(), "tofu", Hierarchy((2, 2, 2)), 4, ("batch",))
    lenet = load_workload("lenet_c")
    plan = make_plan(lenet, "tofu", Hierarchy((2, 2, 2, 2)), 256,
                     options=PlanOptions(kinds=("batch", "out")))
    assert {kind for column in plan.columns for kind in column} <= {"batch", "out"}
    plan = make_plan(lenet, "tofu", Hierarchy((2, 2, 2, 2)), 256)
    assert "in" not in plan.columns[0]  # one input channel: in is never offered
