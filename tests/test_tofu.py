"""The `tofu` strategy: Tofu's partition-n-reduce costs and its recursive search (EuroSys 2019)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import pytest

from hypar_sim.errors import InputError
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.shares import Column
from hypar_sim.planner import tofu
from hypar_sim.planner.strategies import STRATEGIES, PlanOptions, make_plan
from hypar_sim.planner.traffic import traffic_model
from hypar_sim.workload.layers import FeatureShape, Layer, Pool, make_conv, make_fc
from hypar_sim.workload.network import Network, load_network

LAYOUT = traffic_model("layout")
ONE = Hierarchy((2,))


def _plans(layers: Sequence[Layer], batch: int, hierarchy: Hierarchy,
           kinds: Sequence[str]) -> list[tuple[Column, ...]]:
    """Every plan of `kinds` the layout model offers (each layer's columns)."""
    options = [[c for c in itertools.product(kinds, repeat=hierarchy.levels)
                if LAYOUT.offered(layer, batch, c, hierarchy)] for layer in layers]
    return list(itertools.product(*options))


def _cost(layers: Sequence[Layer], batch: int, plan: Sequence[Column],
          hierarchy: Hierarchy) -> float:
    return sum(tofu.plan_costs(layers, batch, plan, hierarchy, 4))


def _search(layers: Sequence[Layer], batch: int, hierarchy: Hierarchy,
            kinds: Sequence[str] = tofu.TOFU_KINDS) -> list[Column]:
    return tofu.recursive_search(layers, batch, hierarchy, kinds, 4, LAYOUT.offered)


def test_registered() -> None:
    assert "tofu" in STRATEGIES and STRATEGIES["tofu"].searches


def test_weight_cost_by_kind() -> None:
    """conv 4 -> 8 channels, 3x3: |W| = 288 elements. A batch or spatial worker reads all of W
    in the forward and backward-data operators and writes partial dW: 3 (k-1) |W| (2 (k-1)
    |W| for the first layer, which has no backward-data operator); out and in split W."""
    layer = make_conv("conv", FeatureShape(4, 8, 8), 8, 3, 1, 1)
    box = tofu.group_box(layer, 2, (), ())
    assert [tofu.weight_cost(layer, box, kind, 2, False) for kind in tofu.TOFU_KINDS] == \
        [864.0, 0.0, 0.0, 864.0]
    assert tofu.weight_cost(layer, box, "batch", 3, False) == 3 * 2 * 288
    assert tofu.weight_cost(layer, box, "batch", 2, True) == 2 * 288


def test_batch_to_in_boundary_is_hypars_table_2() -> None:
    """fc 4 -> 64 (batch) then fc 64 -> 4 (in), batch 8, two workers: F = 8 x 64 = 512
    elements. Forward: F partitioned on channels, each owner fetches the other's samples
    of its channels, 2 x 128 = |F|/2, and both operators of the in layer read their own
    part; backward the same for E: |F|/2 + |E|/2, HyPar's 2 (0.25 A(F) + 0.25 A(E))."""
    a = make_fc("fc_a", FeatureShape(4, 1, 1), 64)
    b = make_fc("fc_b", a.output, 4)
    boxes = [tofu.group_box(layer, 8, (), ()) for layer in (a, b)]
    assert tofu.boundary_cost(a, b, *boxes, "batch", "in", 2, True) == 512.0
    assert tofu.boundary_cost(a, b, *boxes, "batch", "batch", 2, True) == 0.0


def test_spatial_halo_hand_worked() -> None:
    """conv1 (3 -> 4, 3x3 pad 1, 8x8) then conv2 (4 -> 8, same), batch 2, both split by
    rows on two workers. A row of conv1's output is 2 x 4 x 8 = 64 elements. Forward:
    conv2's workers read rows [0, 5) and [3, 8), one halo row each beyond their half,
    for the forward and weight-gradient operators: 2 x 2 x 64 = 256. Backward: conv2's
    input errors overlap on rows 3 and 4 (partial sums), one row fetched by each owner:
    128. Weights: conv1 (first) 2 |W1| = 216, conv2 3 |W2| = 864. The loss takes conv2's
    rows where they are: 0. Total 1464 elements."""
    conv1 = make_conv("conv1", FeatureShape(3, 8, 8), 4, 3, 1, 1)
    conv2 = make_conv("conv2", conv1.output, 8, 3, 1, 1)
    boxes = [tofu.group_box(layer, 2, (), ()) for layer in (conv1, conv2)]
    assert tofu.boundary_cost(conv1, conv2, *boxes, "spatial", "spatial", 2, True) == 384.0
    assert tofu.plan_costs([conv1, conv2], 2, [("spatial",), ("spatial",)], ONE, 1) == (1464.0,)


def test_in_split_loss_after_pooling() -> None:
    """An in-split last layer (8 x 4 x 4 pooled from 8 x 8 x 8, batch 2: |O| = 256): the
    partial sums are reduced before 2x2 pooling, (k-1) 4 |O| = 1024, and its two backward
    operators read all of the error, 2 (k-1) |O| = 512."""
    layer = make_conv("conv", FeatureShape(4, 8, 8), 8, 3, 1, 1, Pool(2, 2))
    box = tofu.group_box(layer, 2, (), ())
    assert tofu.boundary_cost(layer, None, box, None, "in", None, 2, False) == 1536.0


def test_step_cost_times_groups() -> None:
    """fc 16 -> 8 (|W| = 128) alone, batch 8, 2 x 2 workers. Batch then batch: step 1 costs
    2 |W| (the first layer: forward reads, dW reduced); step 2 the same on each of the two
    groups, whose share still has all of W. Batch and out commute (Tofu's insight behind
    Theorem 1): either order costs 2 |W| in all."""
    layer = make_fc("fc", FeatureShape(16, 1, 1), 8)
    two = Hierarchy((2, 2))
    assert tofu.plan_costs([layer], 8, [("batch", "batch")], two, 4) == (1024.0, 2048.0)
    assert tofu.plan_costs([layer], 8, [("batch", "out")], two, 4) == (1024.0, 0.0)
    assert tofu.plan_costs([layer], 8, [("out", "batch")], two, 4) == (0.0, 1024.0)


def _pooled_chain() -> list[Layer]:
    conv1 = make_conv("conv1", FeatureShape(3, 16, 16), 16, 3, 1, 1, Pool(2, 2))
    conv2 = make_conv("conv2", conv1.output, 32, 3, 1, 1, Pool(2, 2))
    return [conv1, conv2, make_fc("fc", conv2.output, 10)]


def _wide_chain() -> list[Layer]:
    conv1 = make_conv("conv1", FeatureShape(16, 32, 32), 16, 3, 1, 1)
    conv2 = make_conv("conv2", conv1.output, 16, 3, 1, 1, Pool(2, 2))
    return [conv1, conv2, make_fc("fc", conv2.output, 256)]


@pytest.mark.parametrize(("chain", "batch", "sizes", "expected"), [
    (_pooled_chain, 8, (2, 2), [("batch", "out"), ("batch", "in"), ("in", "in")]),
    (_pooled_chain, 8, (3, 2), [("batch", "out"), ("batch", "in"), ("in", "in")]),
    (_wide_chain, 2, (2, 2), [("batch", "spatial"), ("batch", "spatial"), ("in", "in")]),
])
def test_search_is_brute_force_argmin(chain, batch: int, sizes: tuple[int, ...],
                                      expected: list[Column]) -> None:
    """On these 3-layer chains at two levels, all four kinds, the recursion's plan has the
    least sum of delta_i over every plan (1800 to 2160 of them)."""
    layers, hierarchy = chain(), Hierarchy(sizes)
    plan = _search(layers, batch, hierarchy)
    assert plan == expected
    best = min(_cost(layers, batch, p, hierarchy) for p in _plans(layers, batch, hierarchy,
                                                                   tofu.TOFU_KINDS))
    assert _cost(layers, batch, plan, hierarchy) == pytest.approx(best, rel=1e-12)


def test_each_step_exact_but_recursion_not_always_optimal() -> None:
    """Each step's DP is exact: delta_1 is the least over all first-step plans, delta_2 the
    least given step 1. But Theorem 1's proof needs steps whose costs commute, and here a
    split's cost depends on the steps before it. The convs take batch at both levels. For
    fc, the batch -> in conversion of its input and the loss cost 12480 elements at step
    1, and only 6528 (both groups) at step 2 after a first in step: half of what each
    group's workers read came from the other group at step 1 and is partitioned among
    them as it arrives. fc's weights cost 9216 under batch at either step. Step 1 sees
    only its own cost and picks batch for fc (9216 < 12480); the best second step is then
    in, 125760 bytes in all; the dearer start, in then in, costs 115008 (the recursion's
    plan costs 9% more)."""
    conv1 = make_conv("conv1", FeatureShape(16, 12, 16), 4, 5, 1, 2)
    conv2 = make_conv("conv2", conv1.output, 4, 1)
    layers = [conv1, conv2, make_fc("fc", conv2.output, 4)]
    hierarchy, kinds = Hierarchy((2, 2)), ("batch", "in")
    plan = _search(layers, 16, hierarchy, kinds)
    assert plan == [("batch", "batch"), ("batch", "batch"), ("batch", "in")]
    deltas = tofu.plan_costs(layers, 16, plan, hierarchy, 4)
    assert deltas == (49856.0, 75904.0)
    firsts = _plans(layers, 16, ONE, kinds)
    assert deltas[0] == min(tofu.plan_costs(layers, 16, p, ONE, 4)[0] for p in firsts)
    seconds = [tuple(c + (k,) for c, k in zip((p[:1] for p in plan), ks, strict=True))
               for ks in itertools.product(kinds, repeat=3)]
    assert deltas[1] == min(tofu.plan_costs(layers, 16, p, hierarchy, 4)[1] for p in seconds)
    best = min(_plans(layers, 16, hierarchy, kinds), key=lambda p: _cost(layers, 16, p, hierarchy))
    assert best == (("batch", "batch"), ("batch", "batch"), ("in", "in"))
    assert _cost(layers, 16, best, hierarchy) == 115008.0 < sum(deltas) == 125760.0


def test_plan_differs_from_hypar() -> None:
    """fc 4 -> 64 then fc 64 -> 4, batch 8, two accelerators, kinds batch and in. Both
    keep fc_a batch (its 256 weights are cheaper to share than its output). For fc_b
    (|W| = 256, input F = 512, output O = 32 elements): HyPar replicates weights, so
    batch costs an all-reduce, 2 |W| = 512, against in's conversion |F| plus the loss's
    reduce and error gather 2 |O|: 576, and it keeps batch. Tofu keeps one copy of every
    tensor (Sec 9), so batch fetches W for the forward and the backward-data operators
    and reduces dW: 3 |W| = 768, against in's |F| + 3 |O| = 608 (the in layer's two
    backward operators each read the whole error), and it picks in. The layout model
    (HyPar's cost) then charges Tofu's plan 1088 elements against HyPar's 1024."""
    a = make_fc("fc_a", FeatureShape(4, 1, 1), 64)
    network = Network("two_fc", FeatureShape(4, 1, 1), (a, make_fc("fc_b", a.output, 4)))
    options = PlanOptions(kinds=("batch", "in"), traffic_model="layout")
    mine, hypar = (make_plan(network, name, ONE, 8, options=options) for name in ("tofu", "hypar"))
    assert mine.choices == (("batch", "in"),) and hypar.choices == (("batch", "batch"),)
    assert (mine.traffic_bytes, hypar.traffic_bytes) == (4 * 1088, 4 * 1024)
    costs = {p: tofu.plan_costs(network.layers, 8, p, ONE, 1)[0]
             for p in ((("batch",), ("batch",)), (("batch",), ("in",)))}
    assert costs == {(("batch",), ("batch",)): 512 + 768, (("batch",), ("in",)): 512 + 512 + 96}


@pytest.mark.parametrize("sizes", [(3, 2), (3, 2, 2), (5,), (2, 3)])
def test_any_hierarchy(sizes: tuple[int, ...]) -> None:
    """One recursion step per level, top first, any level sizes; the plan is a column of
    Tofu's kinds per layer that the layout model offers (cifar_c's first conv has 3
    input channels: never split 5 ways by in)."""
    network, hierarchy = load_network("cifar_c"), Hierarchy(sizes)
    options = PlanOptions(kinds=tofu.TOFU_KINDS, traffic_model="layout")
    plan = make_plan(network, "tofu", hierarchy, 100, options=options)
    assert all(len(column) == len(sizes) and set(column) <= set(tofu.TOFU_KINDS)
               for column in plan.columns)
    assert all(LAYOUT.offered(layer, 100, column, hierarchy)
               for layer, column in zip(network.layers, plan.columns, strict=True))
    assert plan.traffic_bytes > 0
    assert len(tofu.plan_costs(network.layers, 100, plan.columns, hierarchy, 4)) == len(sizes)


def test_kinds_honoured() -> None:
    assert tofu.allowed_kinds(("in", "heads", "batch")) == ("batch", "in")
    with pytest.raises(InputError, match="--kinds: strategy tofu takes only"):
        tofu.allowed_kinds(("heads",))
    network = load_network("lenet_c")
    options = PlanOptions(kinds=("batch", "out"), traffic_model="layout")
    plan = make_plan(network, "tofu", Hierarchy((2, 2, 2, 2)), 256, options=options)
    assert {kind for column in plan.columns for kind in column} <= {"batch", "out"}
    everything = PlanOptions(kinds=tofu.TOFU_KINDS, traffic_model="layout")
    plan = make_plan(network, "tofu", Hierarchy((2, 2, 2, 2)), 256, options=everything)
    assert "in" not in plan.columns[0]  # one input channel: in is never offered
