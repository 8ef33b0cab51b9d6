"""The `grid` strategy (hypar_sim.planner.grid): 2D/2.5D/3D grids per contraction (Li et al.,
"Efficient distributed algorithms for Convolutional Neural Networks", SPAA 2021), costs worked
by hand, brute force, the memory limit, and where its plan differs from hypar's."""

from __future__ import annotations

import itertools

import pytest

import hypar_sim
from hypar_sim.errors import InputError
from hypar_sim.partition import layout_costs, node_layout
from hypar_sim.partition.axes import sites as graph_sites
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.planner import grid
from hypar_sim.planner.options import PlanOptions
from hypar_sim.planner.plan import PlanRequest, make_plan
from hypar_sim.planner.plan_messages import graph_edges
from hypar_sim.planner.strategies import STRATEGIES
from hypar_sim.workload.graph import parse_graph
from hypar_sim.workload.layers import FeatureShape, Pool, make_conv, make_fc
from hypar_sim.workload.network import Network, graph_of, load_network

ALL = ("batch", "spatial", "out", "in")
MIB = 2 ** 20


def _request(graph, hierarchy, batch, kinds=ALL) -> PlanRequest:
    return PlanRequest(graph, graph_sites(graph), batch, hierarchy, tuple(kinds), "greedy",
                       layout_costs.Costs(batch, 4), [], 4)


def _columns(site, batch, hierarchy, kinds=ALL):
    return [c for c in itertools.product(kinds, repeat=hierarchy.levels)
            if node_layout.offered(site, batch, c, hierarchy)]


def _one(node: dict, shape: list[int]):
    """The site of a graph of one node reading input x of `shape`."""
    (site,) = graph_sites(parse_graph({"inputs": {"x": shape}, "nodes": [node]}, "one"))
    return site


def _chain():
    """Three layers as a graph: a padded conv with pooling (folded), a conv, an fc."""
    first = make_conv("c1", FeatureShape(4, 8, 8), 8, 3, padding=1, pool=Pool(2, 2))
    second = make_conv("c2", first.output, 16, 3, padding=1)
    return graph_of(Network("chain", first.input, (first, second, make_fc("f3", second.output,
                                                                          8))))


def _chain_graph():
    """conv, an activation and a pooling (nodes of their own: a pooling that reads a
    convolution directly is folded into it), conv, fc."""
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


def _conv5():
    """VGG-A's conv5_1 and conv5_2 (512 -> 512, 3x3 on 14x14)."""
    return parse_graph({"inputs": {"x": [512, 14, 14]}, "nodes": [
        {"name": "conv5_1", "type": "conv", "out_channels": 512, "kernel": 3, "padding": 1},
        {"name": "conv5_2", "type": "conv", "out_channels": 512, "kernel": 3,
         "padding": 1}]}, "conv5")


def test_registered():
    """The graph planner under the plain name, the paper's four dimensions by default, its
    own cost only, and not under HyPar's reading of a chain (`--traffic-model paper`)."""
    spec = STRATEGIES["grid"]
    assert spec.columns is not None and spec.searches
    assert spec.default_kinds == grid.GRID_KINDS == ALL
    assert spec.objectives == ("bytes",) and spec.own_cost == "Eq. 10 words"
    with pytest.raises(InputError, match="strategy grid plans by its own paper's cost"):
        make_plan(load_network("lenet_c"), "grid", 1, 64,
                  options=PlanOptions(traffic_model="paper"))


def test_hand_worked_fc_grids():
    """fc 8 -> 4, batch 8, 2x2x2 cubes: |In| = 64, |Ker| = 32, |Out| = 32 words.

    data (b8): each member holds all 32 weights, owns 4: receives 28, 224 in all; Eq. 10 per
    member = Out block 4 + In slice 8 + Ker slice 32 + (64 + 32) / 8 = 56.
    b2 x k2 x c2 (3D): In slice 4x4 = 16 (x8 = 128, less 64 owned), Ker slice 2x4 = 8 (64 - 32),
    Out block 4x2 = 8, half of it reduced in from the other replica (32): 64 + 32 + 32 = 128;
    Eq. 10 = 8 + 16 + 8 + 12 = 44.
    model (c8): Out block 32 per member, 7/8 of it reduced in: 224; Eq. 10 = 32 + 8 + 4 + 12.
    k4 x c2: In slice 8x4 = 32 per member (256 - 64 = 192), Out block 8 half reduced in (32);
    Eq. 10 = 8 + 32 + 4 + 12 = 56.
    """
    site = _one({"name": "fc", "type": "fc", "out_features": 4}, [8])
    hierarchy = Hierarchy((2, 2, 2))
    cases = {("batch",) * 3: ("b8", 0, 224, 0, 56), ("batch", "out", "in"): ("b2 x k2 x c2", 64,
                                                                              32, 32, 44),
             ("in",) * 3: ("c8", 0, 0, 224, 56), ("out", "out", "in"): ("k4 x c2", 192, 0, 32,
                                                                        56)}
    for column, (name, inputs, weights, outputs, eq10) in cases.items():
        cost = grid.node_grid_cost(site, 8, column, hierarchy)
        assert (str(cost.grid), cost.in_words, cost.weight_words, cost.out_words,
                cost.eq10_words) == (name, (inputs,), weights, outputs, eq10), column
        # the mapping: P cost_D - 2 (|In| + |Ker|) - |Out| on an even grid
        assert cost.received_words == 8 * eq10 - 2 * (64 + 32) - 32
        assert cost.training_words == 2 * cost.received_words
    first = grid.node_grid_cost(site, 8, ("batch", "out", "in"), hierarchy, (False,))
    assert first.training_words == 2 * 128 - 64  # no error for the network's input


def test_hand_worked_conv_halo_and_pooling():
    """conv 2 -> 2 channels, 4x4 map, 3x3 pad 1, batch 2, split in rows over two cubes: each
    reads 3 of the 4 input rows (one halo row): 2 x 2 x 3 x 4 = 48 words, 96 in all against
    |In| = 64, so 32 words of halo; the 36 weights are replicated once: 36. With a 2x2 pooling
    folded in and split by in (c2): each replica's partial Out block is the pre-pooling one,
    2 x 2 x 4 x 4 = 64 words (not the pooled 16), half of it reduced in: 64 in all."""
    conv = {"name": "conv", "type": "conv", "out_channels": 2, "kernel": 3, "padding": 1}
    cost = grid.node_grid_cost(_one(conv, [2, 4, 4]), 2, ("spatial",), Hierarchy((2,)))
    assert str(cost.grid) == "h2"
    assert (cost.in_words, cost.weight_words, cost.out_words) == ((32,), 36, 0)
    # footprint of a member: 2 x 36 weights and gradients + 48 input + 2x2x2x4 = 32 output
    assert cost.footprint_words == 72 + 48 + 32
    pooled = _one({**conv, "pool": {"kernel": 2}}, [2, 4, 4])
    cost = grid.node_grid_cost(pooled, 2, ("in",), Hierarchy((2,)))
    assert (cost.in_words, cost.weight_words, cost.out_words) == ((0,), 0, 64)
    # 2 x 18 weights and gradients + 2 x 1 x 16 input + the 64-word Out block
    assert cost.footprint_words == 36 + 32 + 64


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
    words = {kind: grid.node_grid_cost(site, 2, (kind,), hierarchy).received_words
             for kind in ALL}
    assert words == {"batch": 0, "spatial": 16, "out": 16, "in": 32}
    assert grid.node_grid_cost(site, 2, ("spatial",), hierarchy).eq10_words == 56
    plan = make_plan(graph, "grid", hierarchy, 2)
    assert plan.columns == (("batch",),)


def test_groups_only_when_asked():
    """A depthwise convolution (4 groups of one channel) has no K or C to split: the paper's
    dimensions leave it b and h; with `groups` allowed, g4 reads only its groups' channels and
    holds only their kernels: no words at all."""
    graph = parse_graph({"inputs": {"x": [4, 4, 4]}, "nodes": [
        {"name": "dw", "type": "conv", "out_channels": 4, "kernel": 3, "padding": 1,
         "groups": 4}]}, "depthwise")
    hierarchy = Hierarchy((2, 2))
    paper = grid.grid_columns(_request(graph, hierarchy, 4))
    assert set(paper[0]) <= {"batch", "spatial"}
    grouped = grid.grid_columns(_request(graph, hierarchy, 4, (*ALL, "groups")))
    assert grouped == [("groups", "groups")]
    site = graph_sites(graph)[0]
    assert grid.node_grid_cost(site, 4, grouped[0], hierarchy, (False,)).training_words == 0


@pytest.mark.parametrize("sizes", [(2, 2, 2), (3, 2)])
def test_plan_is_the_argmin_over_every_grid(sizes):
    """Brute force over every column of every layer of a 3-layer chain: the plan's paper cost
    per layer is the least; the paper ignores costs between layers, so the plan's sum is the
    least of every plan's."""
    hierarchy, graph, batch = Hierarchy(sizes), _chain(), 6
    columns = grid.grid_columns(_request(graph, hierarchy, batch))
    for i, (site, chosen) in enumerate(zip(graph_sites(graph), columns, strict=True)):
        errors = (i > 0,)
        every = [grid.node_grid_cost(site, batch, column, hierarchy, errors).training_words
                 for column in _columns(site, batch, hierarchy)]
        mine = grid.node_grid_cost(site, batch, chosen, hierarchy, errors).training_words
        assert mine == min(every), site.node.name


def test_cost_depends_on_the_grid_alone():
    """Every column realising one grid costs the same (so the search costs grids)."""
    hierarchy = Hierarchy((3, 2, 2))
    for site in (graph_sites(_chain())[1], graph_sites(_branches())[0]):
        seen: dict[grid.NodeGrid, grid.NodeGridCost] = {}
        for column in _columns(site, 6, hierarchy):
            cost = grid.node_grid_cost(site, 6, column, hierarchy)
            assert seen.setdefault(cost.grid, cost) == cost
        assert len(seen) > 1


def test_two_branch_brute_force():
    """Every offered column of every node of the two-branch graph on 2x2 cubes: each
    contraction's grid has the least training words (the paper's cost is per node, so the
    plan's sum is the least of all plans'); each other node's column has the least layout
    cost on its input edges given its producers' columns."""
    graph, hierarchy, batch = _branches(), Hierarchy((2, 2)), 4
    request = _request(graph, hierarchy, batch)
    columns = grid.grid_columns(request)
    sites, edges = graph_sites(graph), graph_edges(graph)
    for i, site in enumerate(sites):
        every = _columns(site, batch, hierarchy)
        assert columns[i] in every
        if grid.is_contraction(site.node):
            errors = tuple(s not in graph.inputs for s in site.node.inputs)
            words = [grid.node_grid_cost(site, batch, c, hierarchy, errors).training_words
                     for c in every]
            mine = grid.node_grid_cost(site, batch, columns[i], hierarchy, errors)
            assert mine.training_words == min(words), site.node.name
        else:
            def edge_cost(column, i=i, site=site):
                return sum(request.costs.edge(sites[p], site, k, columns[p], column, hierarchy)
                           for p, c, k in edges if c == i)
            assert edge_cost(columns[i]) == min(edge_cost(c) for c in every), site.node.name


def test_weightless_nodes_copy_a_free_producer_column():
    """The activation and the pool after c1 take c1's column (re-splitting nothing costs
    nothing)."""
    graph, hierarchy = _chain_graph(), Hierarchy((2, 2))
    columns = grid.grid_columns(_request(graph, hierarchy, 6))
    assert columns[2] == columns[1] == columns[0]


def test_memory_limit_changes_the_grid():
    """conv5_2 (batch 256, 16 cubes, all kinds): data parallelism (b16) moves the least,
    2 x 15 x |Ker| = 70.8 M words, but each cube keeps 2 x 2.36 M weights and gradients:
    30.25 MiB. b8 x k2 and b8 x c2 move 84.4 M words (|Ker| x 7, and |In| or |Out| x 1, twice:
    |In| = |Out| here) and keep half the weights: 27.375 MiB. With 28 MiB per cube the limit
    picks one of them: b8 x k2, whose column agrees with conv5_1's (conv5_1, reading the
    network's input, computes no input error, so k2 is cheapest for it). Below the leanest
    grid's 27.4 MiB no grid fits, and the error says what is needed (conv5_1, planned first,
    is refused). Without streamed tiles (Case 1a), memory here follows replication."""
    request, hierarchy = _request(_conv5(), Hierarchy((2, 2, 2, 2)), 256), Hierarchy((2, 2, 2, 2))
    site = request.sites[1]
    free = grid.grid_columns(request)
    assert str(grid.node_grid(site, free[1], hierarchy)) == "b16"
    costs = {}
    for column in _columns(site, 256, hierarchy):
        costs.setdefault(grid.node_grid(site, column, hierarchy),
                         grid.node_grid_cost(site, 256, column, hierarchy))
    data = costs[grid.node_grid(site, ("batch",) * 4, hierarchy)]
    assert data.training_words == 2 * 15 * 512 * 512 * 9
    assert data.footprint_words * 4 / MIB == pytest.approx(30.25)
    tied = grid.choose(list(costs.values()), "node conv5_2", 28 * MIB, 4)
    assert {str(c.grid) for c in tied} == {"b8 x k2", "b8 x c2"}
    assert tied[0].footprint_words * 4 / MIB == pytest.approx(27.375)
    assert grid.grid_columns(request, 28 * MIB) == [("batch", "batch", "batch", "out")] * 2
    with pytest.raises(InputError, match=r"node conv5_1 fits no grid.*needs 0\.0267 GiB"):
        grid.grid_columns(request, 27 * MIB)


@pytest.mark.parametrize("previous, expected", [
    (None, ("batch", "batch", "batch", "out")),
    (("in", "spatial", "batch", "batch"), ("in", "batch", "batch", "batch")),
    (("in", "out", "batch", "batch"), ("batch", "out", "batch", "batch"))])
def test_equal_grids_follow_the_producer(previous, expected):
    """conv5_2 with 28 MiB a cube: b8 x k2 and b8 x c2 tie (above), each realised by four
    columns. The column agreeing with the producer's at the most levels is taken: none (the
    larger k, then the kinds' order); three levels only by b8 x c2's (in, b, b, b), two at most
    by b8 x k2; three levels by both (in, b, b, b) and (b, out, b, b), then the larger k."""
    request = _request(_conv5(), Hierarchy((2, 2, 2, 2)), 256)
    planner = grid._Planner(request, ALL, 28 * MIB)
    planner.columns = [previous or ()]  # conv5_1's (no levels: agrees nowhere)
    assert planner.contraction(1, planner.offered(request.sites[1])) == expected


def test_differs_from_hypar_on_sconv():
    """SCONV, kinds batch,in, 16 cubes, batch 256: hypar keeps every layer data parallel;
    grid splits conv3 b8 x c2 and conv4 b4 x c4. On conv3 the paper's count prefers b8 x c2
    (1.797 M words against 1.875 M for b16: replicating |Out| = 0.46 M once saves 0.5 M weight
    words), because the paper starts every layer from an input already spread as that layer
    needs it (its initial distribution, Sec. 2.2) and has no cost between layers. HyPar's
    count, the layout model, charges the batch -> in boundary (conv3's input F and error E
    re-split from samples to channels, its Table 2), which outweighs the saving: hypar's plan
    moves fewer real bytes, grid's plan has the lower paper cost."""
    graph, hierarchy = graph_of(load_network("sconv")), Hierarchy((2, 2, 2, 2))
    options = PlanOptions(kinds=("batch", "in"), search="joint")
    mine = make_plan(graph, "grid", hierarchy, 256, options=options)
    hypar = make_plan(graph, "hypar", hierarchy, 256, options=options)
    assert all(column == ("batch",) * 4 for column in hypar.columns)
    assert mine.columns[2] == ("batch", "batch", "batch", "in")
    sites = graph_sites(graph)
    assert str(grid.node_grid(sites[3], mine.columns[3], hierarchy)) == "b4 x c4"

    def paper(plan):
        return sum(grid.node_grid_cost(site, 256, column, hierarchy, (i > 0,)).training_words
                   for i, (site, column) in enumerate(zip(sites, plan.columns, strict=True)))

    assert paper(mine) < paper(hypar)
    assert hypar.traffic_bytes < mine.traffic_bytes


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
    mine = make_plan(graph, "grid", hierarchy, batch, options=options)
    hypar = make_plan(graph, "hypar", hierarchy, batch, options=options)
    assert hypar.columns == (("batch",),) * 5
    assert mine.columns == (("out",), ("batch",), ("batch",), ("batch",), ("in",))
    sites, costs = graph_sites(graph), layout_costs.Costs(batch, 4)
    stem = {kind: grid.node_grid_cost(sites[0], batch, (kind,), hierarchy, (False,))
            for kind in ("batch", "out")}
    assert (stem["batch"].training_words, stem["out"].training_words) == (432, 192)
    assert costs.edge(sites[0], sites[1], 0, ("out",), ("batch",), hierarchy) == 2048
    assert costs.edge(sites[0], sites[3], 1, ("out",), ("batch",), hierarchy) == 2048
    assert costs.own(sites[0], ("batch",), hierarchy, False) == 1728

    def paper(plan):
        return sum(grid.node_grid_cost(site, batch, column, hierarchy, tuple(
            s not in graph.inputs for s in site.node.inputs)).training_words
            for site, column in zip(sites, plan.columns, strict=True)
            if grid.is_contraction(site.node))

    assert paper(mine) < paper(hypar)
    assert hypar.traffic_bytes < mine.traffic_bytes


def test_vgg_a_plan():
    """VGG-A (all kinds, 16 cubes, batch 256): conv layers get data parallelism, fc1 a 2.5D
    grid (replication factor 8 over in)."""
    plan = hypar_sim.plan("vgg_a", "grid", accelerators=16, batch=256, kinds=ALL)
    assert plan.traffic_bytes > 0
    sites = graph_sites(graph_of(load_network("vgg_a")))
    grids = [str(grid.node_grid(site, column, plan.hierarchy))
             for site, column in zip(sites, plan.columns, strict=True)]
    assert grids[0] == "b16" and grids[8] == "k2 x c8"


def test_kinds_are_honoured():
    """Only allowed kinds appear; a node no grid of them can split is refused; kinds with no
    grid dimension are refused."""
    graph, hierarchy = _branches(), Hierarchy((2, 2))
    for kinds in (("batch", "in"), ("out", "in"), ("batch", "spatial")):
        columns = grid.grid_columns(_request(graph, hierarchy, 4, kinds))
        assert {kind for column in columns for kind in column} <= set(kinds)
    with pytest.raises(InputError, match="node stem .* cannot be split"):
        grid.grid_columns(_request(graph, hierarchy, 1, ("batch",)))
    with pytest.raises(InputError, match="--kinds: the grid strategy needs"):
        grid.grid_columns(_request(graph, hierarchy, 4, ("replicate",)))
