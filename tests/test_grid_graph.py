"""`grid` on graph networks (hypar_sim.planner.grid_graph): the chain's costs recovered, costs
by hand, brute force on a two-branch graph, memory, shipped graphs planned and simulated, and
where its plan differs from hypar's."""

from __future__ import annotations

import itertools

import pytest

import hypar_sim.planner.grid_graph as gg  # registers the graph strategy
from hypar_sim.errors import InputError
from hypar_sim.partition import graph_layout
from hypar_sim.partition.graph_axes import sites as graph_sites
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.planner import grid
from hypar_sim.planner.graph_plan import (
    GraphRequest,
    make_graph_plan,
)
from hypar_sim.planner.plan_messages import graph_edges
from hypar_sim.planner.strategies import STRATEGIES, PlanOptions
from hypar_sim.workload.graph import parse_graph
from hypar_sim.workload.layers import FeatureShape, Pool, make_conv, make_fc

ALL = ("batch", "spatial", "out", "in")
MIB = 2 ** 20


def _request(graph, hierarchy, batch, kinds=ALL) -> GraphRequest:
    return GraphRequest(graph, graph_sites(graph), batch, hierarchy, tuple(kinds), "greedy",
                        graph_layout.Costs(batch, 4), [], 4)


def _columns(site, batch, hierarchy, kinds=ALL):
    return [c for c in itertools.product(kinds, repeat=hierarchy.levels)
            if graph_layout.offered(site, batch, c, hierarchy)]


def _chain_graph():
    """`tests/test_grid.py`'s chain as a graph: conv, an activation and a pooling (nodes of
    their own: a pooling that reads a convolution directly is folded into it), conv, fc."""
    return parse_graph({"inputs": {"x": [4, 8, 8]}, "nodes": [
        {"name": "c1", "type": "conv", "out_channels": 8, "kernel": 3, "padding": 1},
        {"name": "r1", "type": "act", "function": "relu"},
        {"name": "p1", "type": "pool", "kernel": 2},
        {"name": "c2", "type": "conv", "out_channels": 16, "kernel": 3, "padding": 1},
        {"name": "f3", "type": "fc", "out_features": 8}]}, "chain")


def _branches():
    """A stem convolution; a 1x1 branch and a pooled 1x1 branch, concatenated; an fc."""
    return parse_graph({"inputs": {"x": [4, 4, 4]}, "nodes": [
        {"name": "stem", "type": "conv", "out_channels": 8, "kernel": 3, "padding": 1},
        {"name": "b1", "type": "conv", "out_channels": 4, "kernel": 1, "inputs": ["stem"]},
        {"name": "pool", "type": "pool", "kernel": 3, "stride": 1, "padding": 1,
         "inputs": ["stem"]},
        {"name": "b2", "type": "conv", "out_channels": 4, "kernel": 1},
        {"name": "cat", "type": "concat", "inputs": ["b1", "b2"]},
        {"name": "fc", "type": "fc", "out_features": 6}]}, "branches")


def test_registered():
    assert STRATEGIES["grid"].graph is not None


@pytest.mark.parametrize("sizes", [(2, 2), (3, 2)])
def test_contractions_cost_what_the_chain_grid_says(sizes):
    """Every column of a conv, a conv and an fc: the graph nodes' words, Eq. 10 and footprint
    are `grid.grid_cost`'s for the same layers (the first reads the network's input). No
    pooling: a chain layer's spatial split is of its pooled rows, a graph's of the
    convolution's own (a pool is a node), which differ where a level does not divide them."""
    hierarchy, batch = Hierarchy(sizes), 6
    c1 = make_conv("c1", FeatureShape(4, 8, 8), 8, 3, padding=1)
    c2 = make_conv("c2", c1.output, 16, 3, padding=1, stride=2)
    layers = {"c1": c1, "c2": c2, "f3": make_fc("f3", c2.output, 8)}
    graph = parse_graph({"inputs": {"x": [4, 8, 8]}, "nodes": [
        {"name": "c1", "type": "conv", "out_channels": 8, "kernel": 3, "padding": 1},
        {"name": "c2", "type": "conv", "out_channels": 16, "kernel": 3, "padding": 1,
         "stride": 2},
        {"name": "f3", "type": "fc", "out_features": 8}]}, "chain")
    for site in graph_sites(graph):
        layer, first = layers[site.node.name], site.node.name == "c1"
        for column in _columns(site, batch, hierarchy):
            mine = gg.node_grid_cost(site, batch, column, hierarchy, (not first,))
            chain = grid.grid_cost(layer, batch, column, hierarchy, first)
            assert (sum(mine.in_words), mine.weight_words, mine.out_words) == pytest.approx(
                (chain.in_words, chain.weight_words, chain.out_words)), column
            assert (mine.eq10_words, mine.footprint_words, mine.training_words) == \
                pytest.approx((chain.eq10_words, chain.footprint_words, chain.training_words))


@pytest.mark.parametrize("sizes", [(2, 2), (2, 2, 2)])
def test_a_folded_pooling_costs_what_the_chain_grid_says(sizes):
    """A conv with its pooling folded in (overlapping 3x3 stride 2, ceil mode, as cifar_c's):
    every column's words, Eq. 10 and footprint are `grid.grid_cost`'s, whose Out block (the
    partial sums P_c replicas reduce, and memory) is the pre-pooling one, rows split by the
    pooled rows with the pre-pooling rows they need."""
    hierarchy, batch = Hierarchy(sizes), 4
    layer = make_conv("c", FeatureShape(3, 16, 16), 8, 5, padding=2,
                      pool=Pool(3, 2, ceil_mode=True))
    graph = parse_graph({"inputs": {"x": [3, 16, 16]}, "nodes": [
        {"name": "c", "type": "conv", "out_channels": 8, "kernel": 5, "padding": 2,
         "pool": {"kernel": 3, "stride": 2, "ceil_mode": True}}]}, "pooled")
    (site,) = graph_sites(graph)
    for column in _columns(site, batch, hierarchy):
        mine = gg.node_grid_cost(site, batch, column, hierarchy, (False,))
        chain = grid.grid_cost(layer, batch, column, hierarchy, True)
        assert (sum(mine.in_words), mine.weight_words, mine.out_words, mine.eq10_words,
                mine.footprint_words, mine.training_words) == pytest.approx(
            (chain.in_words, chain.weight_words, chain.out_words, chain.eq10_words,
             chain.footprint_words, chain.training_words)), column


def test_hand_worked_fc_node():
    """fc 8 -> 4, batch 8, 2x2x2 cubes (`test_grid`'s numbers): b2 x k2 x c2 receives 64 In,
    32 Ker and 32 Out words; Eq. 10 = Out block 8 + In slice 16 + Ker slice 8 + 96 / 8 = 44."""
    graph = parse_graph({"inputs": {"x": [8]}, "nodes": [
        {"name": "fc", "type": "fc", "out_features": 4}]}, "fc")
    site, hierarchy = graph_sites(graph)[0], Hierarchy((2, 2, 2))
    cost = gg.node_grid_cost(site, 8, ("batch", "out", "in"), hierarchy)
    assert str(cost.grid) == "b2 x k2 x c2"
    assert (cost.in_words, cost.weight_words, cost.out_words, cost.eq10_words) == (
        (64,), 32, 32, 44)
    data = gg.node_grid_cost(site, 8, ("batch",) * 3, hierarchy, (False,))
    assert data.training_words == 2 * 224  # Ker replicated 8 times; no In words to drop


def test_hand_worked_attention_product():
    """Scores = A B^T with A, B two 4 x 2 token streams (positions x features), batch 2, two
    cubes: |A| = |B| = 16, Out 2 x 4 x 4. Split by query rows (h2): B is read whole by both,
    16 words; by key positions (k2): A is, 16; by features (c2, the reduction): each holds a
    partial 32-word Out block, half of it reduced in from the other, 32; by samples: nothing.
    Eq. 10 at h2: Out block 16 + A rows 8 + B 16 + (16 + 16) / 2 = 56."""
    graph = parse_graph({"inputs": {"a": [4, 2], "b": [4, 2]}, "nodes": [
        {"name": "scores", "type": "matmul", "inputs": ["a", "b"], "transpose_b": True}]},
        "attention")
    site, hierarchy = graph_sites(graph)[0], Hierarchy((2,))
    words = {kind: gg.node_grid_cost(site, 2, (kind,), hierarchy).received_words
             for kind in ALL}
    assert words == {"batch": 0, "spatial": 16, "out": 16, "in": 32}
    assert gg.node_grid_cost(site, 2, ("spatial",), hierarchy).eq10_words == 56
    plan = make_graph_plan(graph, "grid", hierarchy, 2)
    assert plan.columns == (("batch",),)


def test_groups_only_when_asked():
    """A depthwise convolution (4 groups of one channel) has no K or C to split: the paper's
    dimensions leave it b and h; with `groups` allowed, g4 reads only its groups' channels and
    holds only their kernels: no words at all."""
    graph = parse_graph({"inputs": {"x": [4, 4, 4]}, "nodes": [
        {"name": "dw", "type": "conv", "out_channels": 4, "kernel": 3, "padding": 1,
         "groups": 4}]}, "depthwise")
    hierarchy = Hierarchy((2, 2))
    paper = gg.grid_graph_columns(_request(graph, hierarchy, 4))
    assert set(paper[0]) <= {"batch", "spatial"}
    grouped = gg.grid_graph_columns(_request(graph, hierarchy, 4, (*ALL, "groups")))
    assert grouped == [("groups", "groups")]
    site = graph_sites(graph)[0]
    assert gg.node_grid_cost(site, 4, grouped[0], hierarchy, (False,)).training_words == 0


def test_two_branch_brute_force():
    """Every offered column of every node of the two-branch graph on 2x2 cubes: each
    contraction's grid has the least training words (the paper's cost is per node, so the
    plan's sum is the least of all plans'); each other node's column has the least layout
    cost on its input edges given its producers' columns."""
    graph, hierarchy, batch = _branches(), Hierarchy((2, 2)), 4
    request = _request(graph, hierarchy, batch)
    columns = gg.grid_graph_columns(request)
    sites, edges = graph_sites(graph), graph_edges(graph)
    for i, site in enumerate(sites):
        every = _columns(site, batch, hierarchy)
        assert columns[i] in every
        if gg.is_contraction(site.node):
            errors = tuple(s not in graph.inputs for s in site.node.inputs)
            words = [gg.node_grid_cost(site, batch, c, hierarchy, errors).training_words
                     for c in every]
            mine = gg.node_grid_cost(site, batch, columns[i], hierarchy, errors)
            assert mine.training_words == min(words), site.node.name
        else:
            def edge_cost(column, i=i, site=site):
                return sum(request.costs.edge(sites[p], site, k, columns[p], column, hierarchy)
                           for p, c, k in edges if c == i)
            assert edge_cost(columns[i]) == min(edge_cost(c) for c in every), site.node.name
    # the same grid by other columns costs the same (so the search costs grids)
    stem = sites[0]
    seen: dict[gg.NodeGrid, float] = {}
    for column in _columns(stem, 6, Hierarchy((3, 2, 2))):
        cost = gg.node_grid_cost(stem, 6, column, Hierarchy((3, 2, 2)))
        assert seen.setdefault(cost.grid, cost.training_words) == cost.training_words


def test_weightless_nodes_copy_a_free_producer_column():
    """The activation and the pool after c1 take c1's column (re-splitting nothing costs
    nothing)."""
    graph, hierarchy = _chain_graph(), Hierarchy((2, 2))
    columns = gg.grid_graph_columns(_request(graph, hierarchy, 6))
    assert columns[2] == columns[1] == columns[0]


def test_memory_limit_changes_the_grid():
    """VGG-A's conv5_1 and conv5_2 as a graph (512 -> 512, 3x3 on 14x14, batch 256, 16 cubes):
    as on the chain (`test_grid`), data parallelism moves the least but keeps 30.25 MiB a
    cube; with 28 MiB the grid is b8 x k2 (27.375 MiB); below that no grid fits (conv5_1,
    planned first, is refused)."""
    graph = parse_graph({"inputs": {"x": [512, 14, 14]}, "nodes": [
        {"name": "conv5_1", "type": "conv", "out_channels": 512, "kernel": 3, "padding": 1},
        {"name": "conv5_2", "type": "conv", "out_channels": 512, "kernel": 3,
         "padding": 1}]}, "conv5")
    hierarchy = Hierarchy((2, 2, 2, 2))
    request = _request(graph, hierarchy, 256)
    free = gg.grid_graph_columns(request)
    assert str(gg.node_grid(request.sites[1], free[1], hierarchy)) == "b16"
    data = gg.node_grid_cost(request.sites[1], 256, ("batch",) * 4, hierarchy)
    assert data.footprint_words * 4 / MIB == pytest.approx(30.25)
    limited = gg.grid_graph_columns(request, 28 * MIB)
    assert limited == [("batch", "batch", "batch", "out")] * 2
    with pytest.raises(InputError, match=r"node conv5_1 fits no grid.*needs 0\.0267 GiB"):
        gg.grid_graph_columns(request, 27 * MIB)


def test_differs_from_hypar_on_a_residual_block():
    """Stem c0 (3 -> 8, 3x3 on 2x2), two 1x1 convolutions, the add joining c0's output back
    in (the skip edge), an fc to 10; batch 16, two cubes, kinds batch, spatial, out, in.

    grid splits c0 by output channels: its 216 weights are not replicated, and the input it
    reads whole on both cubes (192 words) is the network's, whose error is never computed:
    192 words, against 2 x 216 = 432 for data parallelism (its weight gradient). The paper
    starts every layer from its own initial distribution (Sec. 2.2), so nothing charges that
    c0's consumers want its output split by samples. The layout model does: c0 by channels
    costs 2048 bytes on each of its two edges (to c1 and the skip into the add), against
    1728 bytes of weight all-reduce for data parallelism, so hypar keeps c0 (and everything)
    data parallel; the fc's in-split (320 words against 640) is grid's too, for the same
    reason. hypar's plan moves fewer real bytes; grid's has the lower paper cost."""
    graph = parse_graph({"inputs": {"x": [3, 2, 2]}, "nodes": [
        {"name": "c0", "type": "conv", "out_channels": 8, "kernel": 3, "padding": 1},
        {"name": "c1", "type": "conv", "out_channels": 8, "kernel": 1},
        {"name": "c2", "type": "conv", "out_channels": 8, "kernel": 1},
        {"name": "sum", "type": "add", "inputs": ["c2", "c0"]},
        {"name": "fc", "type": "fc", "out_features": 10}]}, "residual")
    hierarchy, batch = Hierarchy((2,)), 16
    options = PlanOptions(kinds=ALL)
    mine = make_graph_plan(graph, "grid", hierarchy, batch, options=options)
    hypar = make_graph_plan(graph, "hypar", hierarchy, batch, options=options)
    assert hypar.columns == (("batch",),) * 5
    assert mine.columns == (("out",), ("batch",), ("batch",), ("batch",), ("in",))
    sites, costs = graph_sites(graph), graph_layout.Costs(batch, 4)
    stem = {kind: gg.node_grid_cost(sites[0], batch, (kind,), hierarchy, (False,))
            for kind in ("batch", "out")}
    assert (stem["batch"].training_words, stem["out"].training_words) == (432, 192)
    assert costs.edge(sites[0], sites[1], 0, ("out",), ("batch",), hierarchy) == 2048
    assert costs.edge(sites[0], sites[3], 1, ("out",), ("batch",), hierarchy) == 2048
    assert costs.own(sites[0], ("batch",), hierarchy, False) == 1728

    def paper(plan):
        return sum(gg.node_grid_cost(site, batch, column, hierarchy, tuple(
            s not in graph.inputs for s in site.node.inputs)).training_words
            for site, column in zip(sites, plan.columns, strict=True)
            if gg.is_contraction(site.node))

    assert paper(mine) < paper(hypar)
    assert hypar.traffic_bytes < mine.traffic_bytes


def test_kinds_are_honoured():
    graph, hierarchy = _branches(), Hierarchy((2, 2))
    for kinds in (("batch", "in"), ("out", "in"), ("batch", "spatial")):
        columns = gg.grid_graph_columns(_request(graph, hierarchy, 4, kinds))
        assert {kind for column in columns for kind in column} <= set(kinds)
    with pytest.raises(InputError, match="node stem .* cannot be split"):
        gg.grid_graph_columns(_request(graph, hierarchy, 1, ("batch",)))
