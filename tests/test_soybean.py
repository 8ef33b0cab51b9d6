"""SoyBean's tensor-tiling planner (hypar_sim.planner.soybean) against its paper and HyPar."""

from __future__ import annotations

import itertools

import pytest

from hypar_sim.errors import InputError
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.kinds import KINDS, Dim
from hypar_sim.planner import soybean
from hypar_sim.planner.soybean import MATMULS, STORED, Tiling, aligned, conversion
from hypar_sim.planner.strategies import STRATEGIES, PlanOptions, make_plan
from hypar_sim.workload.layers import FeatureShape, Layer, Pool, make_conv, make_fc
from hypar_sim.workload.network import Network, available_networks, load_network
from tests.conftest import small_chain

R, C, r, RED = Tiling.ROW, Tiling.COL, Tiling.REP, Tiling.RED
PAPER = PlanOptions(kinds=("batch", "in"), traffic_model="paper")


def _network(*layers: Layer) -> Network:
    return Network("test", layers[0].input, tuple(layers))


def test_registered():
    assert STRATEGIES["soybean"].searches


def test_aligned_forms():
    """Figure 6 / Eq. 2 on each matmul, per kind: (X, Y, Z) in stored orientation."""
    loops = {m.name: m.loops for m in MATMULS}
    assert loops == {"forward": (Dim.K, Dim.C, Dim.N), "backward": (Dim.C, Dim.K, Dim.N),
                     "gradient": (Dim.K, Dim.N, Dim.C)}
    expected = {  # forward W x F -> F', backward W^T x E' -> E, gradient E' x F^T -> dW
        "batch": [(r, C, C), (r, C, C), (C, C, RED)],
        "in": [(C, R, RED), (C, r, R), (r, R, C)],
        "out": [(R, r, R), (R, R, RED), (R, r, R)],
    }
    for kind, forms in expected.items():
        assert [aligned(m, KINDS[kind].dim) for m in MATMULS] == forms


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
    for source, target in itertools.product(STORED, STORED):
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
    layer = make_fc("fc", FeatureShape(64, 1, 1), 10)
    for kind, elements in (("batch", 2 * 640), ("in", 2 * 80), ("out", 0)):
        plan = soybean.plan_cost([layer], 8, [(kind,)], Hierarchy((2,)))
        assert plan.cost_bytes == 4 * elements


def test_out_then_in_costs_nothing_between():
    """fc out -> fc in: F' is produced row-split (K) and read row-split (C of the next):
    no conversion, only the last layer's reduction and gather (2 x 8 x 10)."""
    fc1 = make_fc("fc1", FeatureShape(64, 1, 1), 32)
    fc2 = make_fc("fc2", fc1.output, 10)
    plan = soybean.plan_cost([fc1, fc2], 8, [("out",), ("in",)], Hierarchy((2,)))
    assert plan.layer_bytes[0] == (0.0, 4 * 160.0)


@pytest.mark.parametrize("k", [2, 3])
def test_one_cut_is_the_minimum_over_kinds_and_tilings(k):
    """Eqs. 4-5 against brute force: every kind of every layer and every stored tiling of
    every shared matrix (9^4 assignments x 27 plans) on a 3-layer chain with pooling."""
    layers, batch, kinds = small_chain(), 6, ("batch", "in", "out")
    options = [[soybean.layer_cut(kind, soybean.share_areas(layer, batch, (), ()), k, i == 0)
                for kind in kinds] for i, layer in enumerate(layers)]
    loss = soybean.loss_cut(soybean.share_areas(layers[-1], batch, (), ()), k)
    best = min(
        sum(cut.own + cut.inputs[states[i]] + cut.outputs[states[i + 1]]
            for i, cut in enumerate(cuts)) + loss[states[-1]]
        for cuts in itertools.product(*options)
        for states in itertools.product(range(9), repeat=len(layers) + 1))
    cut = soybean.one_cut(options, loss)
    assert cut.delta == pytest.approx(best)
    plan = soybean.plan_cost(layers, batch, [(kind,) for kind in cut.kinds], Hierarchy((k,)))
    assert plan.cost_bytes == pytest.approx(4 * best)


def test_k_cuts_scale_deeper_cuts_by_the_groups():
    """Theorem 1, c = sum_h groups_h delta_h: an fc layer by batch at every level all-reduces
    the whole dW in every group: 2 W at a two-way level, 2 (k - 1) W = 4 W at a three-way
    one; by in, N and K are never split, so every group reduces and gathers all of F'."""
    layer = make_fc("fc", FeatureShape(64, 1, 1), 10)
    weights, output = 640 * 4, 8 * 10 * 4
    plan = soybean.plan_cost([layer], 8, [("batch", "batch")], Hierarchy((2, 2)))
    assert plan.deltas == (2 * weights, 2 * weights)
    assert plan.cost_bytes == 2 * weights + 2 * 2 * weights
    plan = soybean.plan_cost([layer], 12, [("batch", "batch")], Hierarchy((3, 2)))
    assert plan.cost_bytes == 4 * weights + 3 * 2 * weights
    plan = soybean.plan_cost([layer], 8, [("in", "in")], Hierarchy((2, 2)))
    assert plan.cost_bytes == 2 * output + 2 * 2 * output
    plan = soybean.plan_cost([layer], 8, [("in",)], Hierarchy((3,)))
    assert plan.cost_bytes == 2 * 2 * output  # red -> R and R -> r, (k - 1) A each


def test_three_way_level_plans_under_the_layout_model():
    network = load_network("lenet_c")
    plan = make_plan(network, "soybean", Hierarchy((3, 2)), 96,
                     options=PlanOptions(kinds=("batch", "in", "out")))
    assert plan.hierarchy.sizes == (3, 2) and plan.traffic_bytes > 0
    assert all(len(column) == 2 for column in plan.columns)


def test_kinds_and_offered_are_honoured():
    network = load_network("lenet_c")
    only_batch = make_plan(network, "soybean", 2, 256, options=PlanOptions(kinds=("batch",)))
    assert {kind for column in only_batch.columns for kind in column} == {"batch"}
    plan = make_plan(network, "soybean", 4, 256, options=PlanOptions(kinds=("batch", "in")))
    assert {kind for column in plan.columns for kind in column} <= {"batch", "in"}
    with pytest.raises(InputError, match="soybean cannot split layer conv1"):
        make_plan(network, "soybean", 1, 256, options=PlanOptions(kinds=("in",)))
    with pytest.raises(InputError, match="--kinds: soybean searches batch, in and out"):
        make_plan(network, "soybean", 1, 256, options=PlanOptions(kinds=("spatial",)))


def test_only_the_bytes_objective():
    """SoyBean minimises its own Eq. 3 bytes: the registry refuses time and energy."""
    options = PlanOptions(objective="time")
    with pytest.raises(InputError, match="strategy 'soybean' takes bytes"):
        make_plan(load_network("lenet_c"), "soybean", 1, 256, options=options)


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
    for name in available_networks():
        network = load_network(name)
        hypar = make_plan(network, "hypar", levels, 256, options=PAPER)
        cost = soybean.plan_cost(network.layers, 256, hypar.columns, hypar.hierarchy)
        extra = _pooling_terms(network.layers, 256, hypar.columns, levels)
        assert cost.cost_bytes == pytest.approx(hypar.traffic_bytes + extra, rel=1e-12), name
    sfc = load_network("sfc")
    hypar = make_plan(sfc, "hypar", levels, 256, options=PAPER)
    ours = make_plan(sfc, "soybean", levels, 256, options=PAPER)
    assert ours.choices == hypar.choices
    assert soybean.plan_cost(sfc.layers, 256, ours.columns, ours.hierarchy).cost_bytes == \
        hypar.traffic_bytes


def test_plan_differs_from_hypar():
    """conv (1 -> 4 channels, 3x3, 10x10 -> 8x8, 2x2 pooling to 4x4) then fc 64 -> 6, batch
    8, two accelerators, kinds batch and in. In elements: conv by batch 2 A(W) = 72 either
    way. HyPar: fc by in costs 2 A(F_out) = 96 plus Table 2's dp -> mp A(F) = 512 (F = 8 x 64
    pooled), 608 < fc by batch 2 A(W) = 768: batch, in. SoyBean: F, pooled, is read row-split
    by fc's forward and gradient, each converting C -> R (2 x 256 = 512; converting the
    2048-element map before pooling costs 1024), E is converted once (256), the reduction
    and the loss's gather 96: 864 > 768: batch, batch."""
    conv = make_conv("conv", FeatureShape(1, 10, 10), 4, 3, pool=Pool(2, 2))
    network = _network(conv, make_fc("fc", conv.output, 6))
    hypar = make_plan(network, "hypar", 1, 8, options=PAPER)
    ours = make_plan(network, "soybean", 1, 8, options=PAPER)
    assert hypar.choices == (("batch", "in"),) and hypar.traffic_bytes == 4 * (72 + 96 + 512)
    assert ours.choices == (("batch", "batch"),) and ours.traffic_bytes == 4 * (72 + 768)
    hypar_cost = soybean.plan_cost(network.layers, 8, hypar.columns, hypar.hierarchy)
    assert hypar_cost.cost_bytes == 4 * (72 + 512 + 256 + 96)
    assert soybean.plan_cost(network.layers, 8, ours.columns, ours.hierarchy).cost_bytes == \
        4 * (72 + 768)


def test_algorithm_1_is_greedy():
    """§4.4 claims the k-cut recursion optimal; here (3 convs, batch 2, two levels) the first
    cut takes in for conv c0 (1,024 bytes less at the top), which costs 2,560 more in each of
    the two groups below: a whole-plan search finds 74,496 bytes, Algorithm 1 78,592."""
    c0 = make_conv("c0", FeatureShape(16, 8, 8), 8, 3, padding=1)
    c1 = make_conv("c1", c0.output, 32, 3, padding=1)
    c2 = make_conv("c2", c1.output, 2, 3, padding=1, pool=Pool(2, 2))
    layers, hierarchy = [c0, c1, c2], Hierarchy((2, 2))
    greedy = soybean.k_cuts(layers, 2, hierarchy, ("batch", "in"))
    assert greedy.columns == (("in", "batch"), ("batch", "in"), ("batch", "in"))
    assert greedy.cost_bytes == 78_592
    columns = list(itertools.product(("batch", "in"), repeat=2))
    best = min(soybean.plan_cost(layers, 2, plan, hierarchy).cost_bytes
               for plan in itertools.product(columns, repeat=3))
    assert best == 74_496


def test_vgg_e_plans_quickly():
    network = load_network("vgg_e")
    plan = make_plan(network, "soybean", 4, 256,
                     options=PlanOptions(kinds=("batch", "in", "out")))
    assert len(plan.columns) == len(network.layers)
