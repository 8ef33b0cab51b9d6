"""AccPar's planner (hypar_sim.planner.accpar) against its cost model, by hand and by brute force."""

from __future__ import annotations

import itertools

import pytest

from hypar_sim.errors import InputError
from hypar_sim.hardware.config import load_hardware
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.planner import accpar
from hypar_sim.planner.accpar import (
    TYPES,
    Hardware,
    Tensors,
    compute_seconds,
    group_tensors,
    inter_elements,
    intra_elements,
    partition_ratio,
    plan_cost,
    plan_levels,
)
from hypar_sim.planner.strategies import STRATEGIES, PlanOptions, PlanRequest, make_plan
from hypar_sim.planner.traffic import traffic_model
from hypar_sim.runner import simulate
from hypar_sim.workload.layers import FeatureShape, Layer, Pool, make_conv, make_fc
from hypar_sim.workload.network import Network, load_network
from tests.conftest import small_chain

ALL = ("batch", "in", "out")
DEFAULT = Hardware.from_config(load_hardware())


def _network(*layers: Layer) -> Network:
    return Network("test", layers[0].input, tuple(layers))


def test_registered_with_its_own_cost_only():
    assert STRATEGIES["accpar"].searches and STRATEGIES["accpar"].objectives == ("bytes",)
    assert dict(TYPES) == {"batch": "Type-I", "in": "Type-II", "out": "Type-III"}
    with pytest.raises(InputError, match="strategy 'accpar' takes bytes"):
        make_plan(load_network("lenet_c"), "accpar", 1, 64, options=PlanOptions(objective="time"))


def test_hardware_numbers_from_the_config():
    """Peak: 32 PUs x 168 PEs x 250 MHz, one MAC per PE a cycle; one link: 1.6 Gb/s = 0.2 GB/s."""
    assert DEFAULT.macs_per_s == 32 * 168 * 250e6
    assert DEFAULT.link_bytes_per_s == 0.2e9


def test_request_hardware_defaults_to_this_array():
    """Without an estimator (AccPar takes only bytes) the default config for the array."""
    request = PlanRequest(load_network("lenet_c"), 64, Hierarchy((2, 2)), PlanOptions(), 4,
                          traffic_model("layout"))
    assert accpar.request_hardware(request) == DEFAULT


def test_partition_ratio():
    """alpha = c_i / (c_i + c_j): identical cubes split evenly; a 3x faster group takes 3/4."""
    assert partition_ratio([DEFAULT.macs_per_s] * 2) == (0.5, 0.5)
    assert partition_ratio([3.0, 1.0]) == (0.75, 0.25)
    assert partition_ratio([2.0] * 3) == pytest.approx((1 / 3,) * 3)
    with pytest.raises(InputError):
        partition_ratio([1.0, 0.0])


def test_one_fc_layer_by_hand():
    """fc 6 -> 4, batch 8, two cubes of 1e6 MAC/s, links of 100 B/s, 4-byte words. Each type
    leaves one partial sum, exchanged whole at k = 2: Type-I dW (24 elements), Type-II F_{l+1}
    (8 x 4 = 32), Type-III E_l (8 x 6 = 48), 0.04 s an element. Every type computes half of
    3 x 8 x 6 x 4 = 576 MACs on one cube: 288 us."""
    layer = make_fc("fc", FeatureShape(6, 1, 1), 4)
    hardware = Hardware(1e6, 100.0)
    t = group_tensors(layer, 8, (), ())
    assert (t.features, t.output, t.weights, t.macs) == (48, 32, 24, 576)
    for kind, elements in (("batch", 24), ("in", 32), ("out", 48)):
        assert intra_elements(kind, t) == elements
        assert compute_seconds(kind, t, 2, 2, hardware) == pytest.approx(288e-6)
        cost = plan_cost([layer], 8, [(kind,)], Hierarchy((2,)), hardware)
        assert cost.communication_s == pytest.approx((elements * 4 / 100,))
        assert cost.computation_s == pytest.approx((288e-6,))
    assert plan_levels([layer], 8, Hierarchy((2,)), ALL, hardware).columns == (("batch",),)


def test_uneven_shares_compute_longer():
    """conv 3 -> 4 channels, 3x3 on 6x6 (padding 1), 2x2 pooling, batch 2: 3 x 2 x 3 x 4 x 36 x
    9 = 23,328 MACs. Halving the batch or K leaves 11,664; C = 3 splits 2 + 1, so the in-split's
    heavier member computes 2/3: 15,552. Type-II exchanges the pooled output (2 x 4 x 9 = 72)."""
    layer = make_conv("conv", FeatureShape(3, 6, 6), 4, 3, padding=1, pool=Pool(2, 2))
    t = group_tensors(layer, 2, (), ())
    assert (t.macs, t.output, t.features, t.weights) == (23_328, 72, 216, 108)
    hardware = Hardware(1.0, 1.0)
    assert [compute_seconds(kind, t, 2, 2, hardware) for kind in ALL] == [11_664, 15_552, 11_664]


def _cells(layout: str, k: int, rows: int, cols: int) -> list[set[tuple[int, int]]]:
    """Every member's cells of a rows x cols matrix: row blocks, column blocks or all."""
    everything = {(i, j) for i in range(rows) for j in range(cols)}
    if layout == "whole":
        return [everything] * k
    size = (rows if layout == "rows" else cols) // k
    index = 0 if layout == "rows" else 1
    return [{cell for cell in everything if cell[index] // size == m} for m in range(k)]


#: What a layer of each type needs of F_l and leaves of E_l (its input), and leaves of F_{l+1}
#: and needs of E_{l+1} (its output), as layouts of the B x D matrices.
CONSUMER = {"batch": "rows", "in": "cols", "out": "whole"}
PRODUCER = {"batch": "rows", "in": "whole", "out": "cols"}


@pytest.mark.parametrize("k", [2, 3])
def test_inter_layer_table_from_layouts(k):
    """Every entry of the inter-layer table, counted cell by cell on a 36 x 36 F_l and E_l:
    what one member needs minus what it holds (F_l: the producer leaves it, the consumer reads
    it; E_l: the consumer leaves it, the producer reads it). At k = 2 these are the authors'
    numbers (1/4 (A(F) + A(E)), 1/2 A(F), 1/2 A(E) or 0)."""
    n = d = 36
    t = Tensors(n, d, 1, 1, 1, 1, 1)
    for before, kind in itertools.product(ALL, ALL):
        f_held, f_need = _cells(PRODUCER[before], k, n, d), _cells(CONSUMER[kind], k, n, d)
        e_held, e_need = _cells(CONSUMER[kind], k, n, d), _cells(PRODUCER[before], k, n, d)
        receipts = {len(f_need[m] - f_held[m]) + len(e_need[m] - e_held[m]) for m in range(k)}
        assert receipts == {inter_elements(before, kind, t, k)}, (before, kind)
    if k == 2:
        area = n * d
        assert [inter_elements(b, a, t) for b in ALL for a in ALL] == [
            0, area / 2, area / 2, area / 2, area / 2, 0, area / 2, 0, area / 2]


def test_intra_layer_all_reduce_factors():
    """k = 2: each member receives the other's whole partial sum (A); k = 3: a ring's
    reduce-scatter and all-gather, 2 x 2/3 A."""
    t = group_tensors(make_fc("fc", FeatureShape(6, 1, 1), 4), 9, (), ())
    assert [intra_elements(kind, t, 2) for kind in ALL] == [24, 36, 54]
    assert [intra_elements(kind, t, 3) for kind in ALL] == pytest.approx([32, 48, 72])


@pytest.mark.parametrize("size", [2, 3])
def test_one_level_dp_is_the_argmin(size):
    """The layer-wise DP against all 27 plans of a 3-layer chain on one level."""
    layers, batch, hierarchy = small_chain(), 6, Hierarchy((size,))
    costs = {plan: plan_cost(layers, batch, plan, hierarchy, DEFAULT).seconds
             for plan in itertools.product([(kind,) for kind in ALL], repeat=3)}
    found = plan_levels(layers, batch, hierarchy, ALL, DEFAULT)
    assert found.seconds == pytest.approx(min(costs.values()), rel=1e-12)
    assert costs[found.columns] == pytest.approx(found.seconds, rel=1e-12)


def test_two_levels_brute_force():
    """All 729 two-level plans of the chain: the hierarchical search's plan is the cheapest by
    AccPar's cost (sum over levels of one group's communication and computation), and its
    lower level is the best of the 27 under its upper one."""
    layers, batch, hierarchy = small_chain(), 6, Hierarchy((2, 2))
    columns = list(itertools.product(ALL, repeat=2))
    costs = {plan: plan_cost(layers, batch, plan, hierarchy, DEFAULT).seconds
             for plan in itertools.product(columns, repeat=3)}
    found = plan_levels(layers, batch, hierarchy, ALL, DEFAULT)
    assert found.columns == min(costs, key=costs.__getitem__)
    assert found.seconds == pytest.approx(min(costs.values()), rel=1e-12)
    top = tuple(column[0] for column in found.columns)
    under = {plan: costs[plan] for plan in costs if tuple(c[0] for c in plan) == top}
    assert min(under, key=under.__getitem__) == found.columns


def test_level_by_level_is_greedy():
    """Like HyPar's Algorithm 2 (and the authors' `h_partition`), the top level is chosen
    first: here conv c0 takes in there (cheaper at the top), which leaves 16 -> 8 channels
    for the lower level to split; batch at the top would cost more there but less in all."""
    c0 = make_conv("c0", FeatureShape(16, 8, 8), 2, 3, padding=1)
    c1 = make_conv("c1", c0.output, 32, 3, padding=1, pool=Pool(2, 2))
    layers, hierarchy = [c0, c1, make_fc("f", c1.output, 4)], Hierarchy((2, 2))
    found = plan_levels(layers, 4, hierarchy, ALL, DEFAULT)
    assert found.columns == (("in", "batch"), ("out", "out"), ("in", "in"))
    better = (("batch", "in"), ("out", "out"), ("in", "in"))
    other = plan_cost(layers, 4, better, hierarchy, DEFAULT)
    assert other.seconds < found.seconds
    assert other.communication_s[0] + other.computation_s[0] > \
        found.communication_s[0] + found.computation_s[0]


def test_compute_changes_the_plan_against_hypar():
    """conv 10 -> 2 channels, 5x5 on 24x24 (padding 2), 4x4 pooling to 6x6, then fc 72 -> 4;
    batch 7 on two cubes, kinds batch and in. AccPar's communication (elements): conv by
    batch 500 (dW) + 252 (I -> II, 1/4 of F and E, 504 each) + fc 28 = 780; conv by in 504
    (pooled output) + 252 (II -> II) + 28 = 784: 0.08 us more. Computation: batch 7 splits
    4 + 3, so the conv's heavier member computes 4/7 (3,456,000 MACs), channels 10 split 5 + 5
    (3,024,000): 0.32 us less by in. AccPar takes (in, in); without its compute term, (batch,
    in), HyPar's plan (which the layout model prefers by far: an in-split conv reduces its
    unpooled output, 8,064 elements)."""
    conv = make_conv("conv", FeatureShape(10, 24, 24), 2, 5, padding=2, pool=Pool(4, 4))
    layers = [conv, make_fc("fc", conv.output, 4)]
    network, hierarchy, options = _network(*layers), Hierarchy((2,)), PlanOptions(
        kinds=("batch", "in"))
    hypar = make_plan(network, "hypar", hierarchy, 7, options=options)
    ours = make_plan(network, "accpar", hierarchy, 7, options=options)
    assert hypar.columns == (("batch",), ("in",)) and ours.columns == (("in",), ("in",))
    assert hypar.traffic_bytes < ours.traffic_bytes
    theirs = plan_cost(layers, 7, hypar.columns, hierarchy, DEFAULT)
    mine = plan_cost(layers, 7, ours.columns, hierarchy, DEFAULT)
    assert theirs.communication_s == pytest.approx((780 * 4 / 0.2e9,))
    assert mine.communication_s == pytest.approx((784 * 4 / 0.2e9,))
    assert theirs.computation_s == pytest.approx(((3_456_000 + 3024) / DEFAULT.macs_per_s,))
    assert mine.computation_s == pytest.approx(((3_024_000 + 3024) / DEFAULT.macs_per_s,))
    no_compute = Hardware(1e30, DEFAULT.link_bytes_per_s)
    assert plan_levels(layers, 7, hierarchy, ("batch", "in"), no_compute).columns == \
        hypar.columns


def test_three_way_level():
    """A (3, 2) hierarchy: fc 6 -> 4 by batch on both levels, batch 12: the top's three groups
    all-reduce dW with 2 x 2/3 x 24 = 32 elements each, the pairs below 24; each level
    computes the heaviest share on its sub-group (4 of 12 samples on 2 cubes, then 2 on 1)."""
    layer = make_fc("fc", FeatureShape(6, 1, 1), 4)
    hardware = Hardware(1e6, 100.0)
    cost = plan_cost([layer], 12, [("batch", "batch")], Hierarchy((3, 2)), hardware)
    assert cost.communication_s == pytest.approx((32 * 0.04, 24 * 0.04))
    macs = 3 * 6 * 4
    assert cost.computation_s == pytest.approx((4 * macs / 2e6, 2 * macs / 1e6))
    plan = make_plan(load_network("lenet_c"), "accpar", Hierarchy((3, 2)), 96,
                     options=PlanOptions(kinds=ALL))
    assert plan.hierarchy.sizes == (3, 2) and all(len(c) == 2 for c in plan.columns)
    assert plan.traffic_bytes > 0


def test_kinds_and_offered_are_honoured():
    network = load_network("lenet_c")
    only_batch = make_plan(network, "accpar", 2, 64, options=PlanOptions(kinds=("batch",)))
    assert {kind for column in only_batch.columns for kind in column} == {"batch"}
    default = make_plan(network, "accpar", 2, 64, options=PlanOptions())  # AccPar's own three
    assert default.columns == make_plan(network, "accpar", 2, 64,
                                        options=PlanOptions(kinds=ALL)).columns
    with pytest.raises(InputError, match="accpar cannot split layer conv1"):
        make_plan(network, "accpar", 1, 64, options=PlanOptions(kinds=("in",)))
    with pytest.raises(InputError, match="--kinds: accpar searches batch, in and out"):
        make_plan(network, "accpar", 1, 64, options=PlanOptions(kinds=("spatial",)))
    with pytest.raises(InputError, match="accpar cannot cost kind"):
        plan_cost(network.layers, 64, [("spatial",)] * 4, Hierarchy((2,)), DEFAULT)


def test_plan_runs_under_the_simulator():
    network = load_network("lenet_c")
    plan = make_plan(network, "accpar", 2, 64, options=PlanOptions(kinds=ALL))
    result = simulate(network, plan, load_hardware())
    assert result.latency_s > 0 and result.traffic_bytes == plan.traffic_bytes


def test_vgg_e_plans_every_layer():
    network = load_network("vgg_e")
    plan = make_plan(network, "accpar", 4, 256, options=PlanOptions(kinds=ALL))
    assert len(plan.columns) == len(network.layers)
