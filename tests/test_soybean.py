"""SoyBean's tensor-tiling planner (hypar_sim.planner.soybean) against its paper, HyPar, hand
counts and brute force; chains are written as graphs (`graph_of`)."""

from __future__ import annotations

import itertools

import pytest

import hypar_sim
from hypar_sim.errors import InputError
from hypar_sim.partition import layout_costs, node_layout
from hypar_sim.partition.axes import sites
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.planner import soybean
from hypar_sim.planner.options import PlanOptions
from hypar_sim.planner.plan import PlanRequest, make_plan
from hypar_sim.planner.search import every_assignment, minimise
from hypar_sim.planner.soybean import SOYBEAN_KINDS, Tiling, conversion
from hypar_sim.planner.strategies import STRATEGIES
from hypar_sim.workload.graph import Graph, parse_graph
from hypar_sim.workload.layers import FeatureShape, Layer, Pool, make_conv, make_fc
from hypar_sim.workload.network import Network, available_networks, graph_of, load_network
from tests.conftest import small_chain

R, C, r, RED = Tiling.ROW, Tiling.COL, Tiling.REP, Tiling.RED
PAPER = PlanOptions(kinds=("batch", "in"), traffic_model="paper")


def _graph(*layers: Layer) -> Graph:
    return graph_of(Network("test", layers[0].input, tuple(layers)))


def _cost(graph: Graph, batch: int, columns, hierarchy: Hierarchy) -> float:
    return sum(soybean.plan_costs(graph, batch, columns, hierarchy))


def _request(graph: Graph, batch: int, hierarchy: Hierarchy,
             kinds=SOYBEAN_KINDS) -> PlanRequest:
    return PlanRequest(graph, sites(graph), batch, hierarchy, tuple(kinds), "",
                       layout_costs.Costs(batch, 4), [])


def test_registered():
    """The module registers the strategy itself, with its paper's kinds and cost."""
    spec = STRATEGIES["soybean"]
    assert spec.searches and spec.columns is soybean.soybean_columns
    assert spec.default_kinds == ("batch", "in", "out") and spec.own_cost == "Eq. 3 bytes"


def test_aligned_forms():
    """Figure 6 / Eq. 2 on an fc layer (W: K x C, F: C x N, F': K x N), per kind: the tiling
    of W (and dW), F (and E) and F' (and E') in the aligned form, red where the loop is
    summed over. Batch: W r, F and F' C (samples); in: W C, F R, F' red; out: W R, F r, F' R
    (the chain's forward, backward and gradient forms, `planner.soybean` docstring)."""
    graph = _graph(make_fc("fc1", FeatureShape(8, 1, 1), 6), make_fc("fc2",
                                                                     FeatureShape(6, 1, 1), 4))
    desc = sites(graph)[1].desc
    assert desc.weights is not None and desc.weights.by_channel
    matrix = {0: R, 1: C, soybean.REP: r}  # W: rows K, columns C
    activation = {0: R, soybean.SAMPLES: C, soybean.REP: r}  # rows channels, columns N
    expected = {"batch": (r, C, C), "in": (C, R, RED), "out": (R, r, R)}
    for kind, forms in expected.items():
        dim = node_layout.dim_of(desc, kind)
        w = (desc.channel, desc.reduction).index(dim) if dim in (
            desc.channel, desc.reduction) else soybean.REP
        out = soybean._axis(desc.makes, dim)
        assert (matrix[w], activation[soybean._axis(desc.reads[0], dim)],
                RED if out == soybean.REP else activation[out]) == forms, kind


def _blocks(tiling: Tiling, k: int, n: int) -> list[set[tuple[int, int]]]:
    size = n // k
    if tiling is r:
        return [{(i, j) for i in range(n) for j in range(n)}] * k
    if tiling is R:
        return [{(i, j) for i in range(m * size, (m + 1) * size) for j in range(n)}
                for m in range(k)]
    return [{(i, j) for j in range(m * size, (m + 1) * size) for i in range(n)}
            for m in range(k)]


@pytest.mark.parametrize("k", [2, 3, 4])
def test_conversion_is_ghost_area_minus_held(k):
    """§4.2.1 on a 12 x 12 matrix, counted cell by cell: what each member needs minus what it
    holds; a partial sum (every member holds a whole partial) sends each member its block of
    the k - 1 others'. red -> r is red -> R -> r, 2(k - 1) (our choice; at k = 2 it is also
    each member fetching the other's whole partial)."""
    n = 12
    for source, target in itertools.product((R, C, r), repeat=2):
        held, needed = _blocks(source, k, n), _blocks(target, k, n)
        cells = sum(len(need - hold) for hold, need in zip(held, needed, strict=True))
        assert conversion(source, target, k) * n * n == pytest.approx(cells)
    for target in (R, C):
        assert conversion(RED, target, k) * n * n == sum(
            (k - 1) * len(block) for block in _blocks(target, k, n))
    assert conversion(RED, r, k) == 2 * (k - 1)
    with pytest.raises(ValueError):
        conversion(R, RED, k)


def test_deeper_cut_volumes_add_up_to_cell_counts():
    """Two two-way cuts of an 8 x 8 matrix over members (g, m), counted cell by cell against
    Theorem 1's sum, delta_0 + 2 delta_1, with `volume` sizing the second cut: a gather
    R.R -> r.r (3 A: each member needs all, holds a quarter), an exchange R.R -> r.C (1.5 A)
    and a reduction red.red -> R.R (3 A: each member sums its quarter from three partials)."""
    n, area = 8, 64
    rows = [{(i, j) for i in range(q * 2, q * 2 + 2) for j in range(n)} for q in range(4)]
    everything = {(i, j) for i in range(n) for j in range(n)}
    cols = [{(i, j) for i in range(n) for j in range(h * 4, h * 4 + 4)} for h in range(2)]
    gather = sum(len(everything - rows[q]) for q in range(4))
    exchange = sum(len(cols[q % 2] - rows[q]) for q in range(4))
    reduction = sum(3 * len(rows[q]) for q in range(4))
    assert (gather, exchange, reduction) == (3 * area, 1.5 * area, 3 * area)
    assert conversion(R, r, 2) * area + 2 * soybean.volume(R, r, 2, area / 2, area) == gather
    assert conversion(R, r, 2) * area + 2 * soybean.volume(R, C, 2, area / 2, area) == exchange
    assert conversion(RED, R, 2) * area + 2 * soybean.volume(RED, R, 2, area, area / 2) == \
        reduction


def test_one_fc_layer_by_hand():
    """One cut of one fc layer (B = 8 samples, 64 -> 10): batch all-reduces dW (red -> r,
    2 A(W)); in reduces F' (red -> R, A(F')) and the loss gathers it (R -> r, A(F')); out
    computes its rows of F' from the (replicated) input and the loss reads them where they
    are: 0."""
    graph = _graph(make_fc("fc", FeatureShape(64, 1, 1), 10))
    for kind, elements in (("batch", 2 * 640), ("in", 2 * 80), ("out", 0)):
        assert soybean.plan_costs(graph, 8, [(kind,)], Hierarchy((2,))) == (4 * elements,)


def test_out_then_in_costs_nothing_between():
    """fc out -> fc in: F' is produced row-split (K) and read row-split (C of the next):
    no conversion, only the last layer's reduction and gather (2 x 8 x 10)."""
    fc1 = make_fc("fc1", FeatureShape(64, 1, 1), 32)
    graph = _graph(fc1, make_fc("fc2", fc1.output, 10))
    assert soybean.plan_costs(graph, 8, [("out",), ("in",)], Hierarchy((2,))) == (4 * 160.0,)


@pytest.mark.parametrize("k", [2, 3])
def test_one_cut_is_the_minimum_over_kinds_and_tilings(k):
    """Eqs. 4-5 against brute force on a 3-layer chain with pooling: every kind of every
    layer and every stored tiling of every shared matrix; the plan's cost (`plan_costs`) is
    that least sum."""
    graph, batch = _graph(*small_chain()), 6
    cut = soybean._Cut(_request(graph, batch, Hierarchy((k,))), [()] * 3, 0, SOYBEAN_KINDS)
    factors, order = cut.factors()
    best, _ = every_assignment(cut.domains(), factors)
    assert minimise(cut.domains(), factors, order)[0] == pytest.approx(best, rel=1e-12)
    columns = soybean.soybean_columns(_request(graph, batch, Hierarchy((k,))))
    assert _cost(graph, batch, columns, Hierarchy((k,))) == pytest.approx(4 * best, rel=1e-12)


def test_one_cut_is_the_brute_force_minimum_of_its_tables():
    """A skip connection's top cut (fc, relu, their sum): the elimination's least cost is
    every assignment's."""
    graph = parse_graph({"inputs": {"x": [6]}, "nodes": [
        {"name": "a", "type": "fc", "out_features": 4},
        {"name": "r", "type": "act", "function": "relu"},
        {"name": "s", "type": "add", "inputs": ["a", "r"]}]}, "skip")
    cut = soybean._Cut(_request(graph, 4, Hierarchy((2, 2))), [()] * 3, 0, SOYBEAN_KINDS)
    factors, order = cut.factors()
    assert minimise(cut.domains(), factors, order)[0] == pytest.approx(
        every_assignment(cut.domains(), factors)[0], rel=1e-12)


def test_k_cuts_scale_deeper_cuts_by_the_groups():
    """Theorem 1, c = sum_h groups_h delta_h: an fc layer by batch at every level all-reduces
    the whole dW in every group: 2 W at a two-way level, 2 (k - 1) W = 4 W at a three-way
    one; by in, N and K are never split, so every group reduces and gathers all of F'."""
    graph = _graph(make_fc("fc", FeatureShape(64, 1, 1), 10))
    weights, output = 640 * 4, 8 * 10 * 4
    assert soybean.plan_costs(graph, 8, [("batch", "batch")], Hierarchy((2, 2))) == \
        (2 * weights, 2 * 2 * weights)
    assert soybean.plan_costs(graph, 12, [("batch", "batch")], Hierarchy((3, 2))) == \
        (4 * weights, 3 * 2 * weights)
    assert soybean.plan_costs(graph, 8, [("in", "in")], Hierarchy((2, 2))) == \
        (2 * output, 2 * 2 * output)
    assert soybean.plan_costs(graph, 8, [("in",)], Hierarchy((3,))) == (2 * 2 * output,)


def test_three_way_level_plans_under_the_layout_model():
    plan = hypar_sim.plan("lenet_c", "soybean", accelerators=6, batch=96)
    assert plan.hierarchy.sizes == (3, 2) and plan.traffic_bytes > 0
    assert all(len(column) == 2 for column in plan.columns)
    assert {kind for column in plan.columns for kind in column} <= set(SOYBEAN_KINDS)


def test_kinds_and_offered_are_honoured():
    graph = graph_of(load_network("lenet_c"))
    only_batch = make_plan(graph, "soybean", Hierarchy((2,)), 256,
                           options=PlanOptions(kinds=("batch",)))
    assert {kind for column in only_batch.columns for kind in column} == {"batch"}
    plan = make_plan(graph, "soybean", Hierarchy((2, 2)), 256,
                     options=PlanOptions(kinds=("batch", "in")))
    assert {kind for column in plan.columns for kind in column} == {"batch", "in"}
    with pytest.raises(InputError, match="soybean cannot split node conv1"):
        make_plan(graph, "soybean", Hierarchy((2,)), 256, options=PlanOptions(
            kinds=("in",)))
    with pytest.raises(InputError, match="--kinds: soybean searches batch, in and out"):
        make_plan(graph, "soybean", Hierarchy((2,)), 256, options=PlanOptions(
            kinds=("spatial",)))
    with pytest.raises(InputError, match="plan: soybean cannot cost kind"):
        soybean.plan_costs(graph, 256, [("spatial",)] * len(graph.nodes), Hierarchy((2,)))


def test_only_the_bytes_objective():
    """SoyBean minimises its own Eq. 3 bytes: the registry refuses time and energy."""
    with pytest.raises(InputError, match="strategy 'soybean' takes bytes"):
        hypar_sim.plan("lenet_c", "soybean", accelerators=2, batch=256, objective="time")


def test_no_chain_reading():
    """SoyBean plans by its own Eq. 3 on the layout model: HyPar's chain reading refuses it."""
    with pytest.raises(InputError, match="--traffic-model paper: strategy soybean plans by"):
        make_plan(load_network("lenet_c"), "soybean", 1, 256, options=PAPER)


def _pooling_terms(layers, batch, columns, levels, word_bytes=4):
    """What SoyBean's cost adds to HyPar's paper reading on a batch/in plan (module docstring):
    (1) an in-split layer reduces F' before pooling: A(F'_pre) - A(F_post) in its share;
    (2) batch -> in: min(A, A_pre / 2) - A / 2 on the in layer's input share."""
    extra = 0.0
    for h in range(levels):
        for index, (layer, column) in enumerate(zip(layers, columns, strict=True)):
            if column[h] != "in":
                continue
            n = batch / 2 ** column[:h].count("batch")
            extra += 2 ** h * n * (layer.conv_output.size - layer.output.size)
            if index and columns[index - 1][h] == "batch":
                before = layers[index - 1]
                share = n / 2 ** column[:h].count("in")
                post, pre = share * before.output.size, share * before.conv_output.size
                extra += 2 ** h * (min(post, pre / 2) - post / 2)
    return extra * word_bytes


@pytest.mark.parametrize("levels", [2, 4])
def test_costs_are_hypars_but_for_pooling(levels):
    """On HyPar's own plan (batch, in, two-way levels) for every shipped chain network, at 4
    and 16 accelerators, SoyBean's cost is HyPar's paper traffic plus the two pooling terms,
    to the byte; without pooling (sfc) SoyBean plans and costs exactly as HyPar."""
    hierarchy = Hierarchy((2,) * levels)
    for name in available_networks():
        network = load_network(name)
        hypar = make_plan(network, "hypar", levels, 256, options=PAPER)
        cost = _cost(graph_of(network), 256, hypar.columns, hierarchy)
        extra = _pooling_terms(network.layers, 256, hypar.columns, levels)
        assert cost == pytest.approx(hypar.traffic_bytes + extra, rel=1e-12), name
    sfc = load_network("sfc")
    hypar = make_plan(sfc, "hypar", levels, 256, options=PAPER)
    ours = make_plan(graph_of(sfc), "soybean", hierarchy, 256,
                     options=PlanOptions(kinds=("batch", "in")))
    assert ours.columns == hypar.columns
    assert _cost(graph_of(sfc), 256, ours.columns, hierarchy) == hypar.traffic_bytes


def test_plan_differs_from_hypar():
    """conv (1 -> 4 channels, 3x3, 10x10 -> 8x8, 2x2 pooling to 4x4) then fc 64 -> 6, batch
    8, two accelerators, kinds batch and in. In elements: conv by batch 2 A(W) = 72 either
    way. HyPar: fc by in costs 2 A(F_out) = 96 plus Table 2's dp -> mp A(F) = 512 (F = 8 x 64
    pooled), 608 < fc by batch 2 A(W) = 768: batch, in. SoyBean: F, pooled, is read row-split
    by fc's forward and gradient, each converting C -> R (2 x 256 = 512; converting the
    2048-element map before pooling costs 1024), E is converted once (256), the reduction
    and the loss's gather 96: 864 > 768: batch, batch. The layout model charges SoyBean's
    plan HyPar's replicated-weights all-reduces, 72 + 768."""
    conv = make_conv("conv", FeatureShape(1, 10, 10), 4, 3, pool=Pool(2, 2))
    fc = make_fc("fc", conv.output, 6)
    network, graph, one = Network("test", conv.input, (conv, fc)), _graph(conv, fc), Hierarchy((2,))
    hypar = make_plan(network, "hypar", 1, 8, options=PAPER)
    ours = make_plan(graph, "soybean", one, 8, options=PlanOptions(kinds=("batch", "in")))
    assert hypar.choices == (("batch", "in"),) and hypar.traffic_bytes == 4 * (72 + 96 + 512)
    assert ours.columns == (("batch",), ("batch",)) and ours.traffic_bytes == 4 * (72 + 768)
    assert _cost(graph, 8, hypar.columns, one) == 4 * (72 + 512 + 256 + 96)
    assert _cost(graph, 8, ours.columns, one) == 4 * (72 + 768)


def test_algorithm_1_is_greedy():
    """§4.4 claims the k-cut recursion optimal; here (3 convs, batch 2, two levels) the first
    cut takes in for conv c0 (1,024 bytes less at the top), which costs 2,560 more in each of
    the two groups below: a whole-plan search finds 74,496 bytes, Algorithm 1 78,592."""
    c0 = make_conv("c0", FeatureShape(16, 8, 8), 8, 3, padding=1)
    c1 = make_conv("c1", c0.output, 32, 3, padding=1)
    c2 = make_conv("c2", c1.output, 2, 3, padding=1, pool=Pool(2, 2))
    graph, hierarchy, kinds = _graph(c0, c1, c2), Hierarchy((2, 2)), ("batch", "in")
    greedy = soybean.soybean_columns(_request(graph, 2, hierarchy, kinds))
    assert greedy == [("in", "batch"), ("batch", "in"), ("batch", "in")]
    assert _cost(graph, 2, greedy, hierarchy) == 78_592
    columns = list(itertools.product(kinds, repeat=2))
    best = min(_cost(graph, 2, plan, hierarchy) for plan in itertools.product(columns, repeat=3))
    assert best == 74_496


def test_soybean_plans_and_runs_a_transformer():
    plan = hypar_sim.plan("bert_base", "soybean", accelerators=4, batch=4)
    assert {kind for column in plan.columns for kind in column} <= set(SOYBEAN_KINDS)
    result = hypar_sim.simulate("bert_base", "soybean", accelerators=4, batch=4,
                                engine="analytic")
    assert result.traffic_bytes == pytest.approx(plan.traffic_bytes, rel=1e-12)
