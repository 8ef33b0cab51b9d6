"""HyPar's communication model and planner against the paper (Song et al., HPCA 2019)."""

from __future__ import annotations

import itertools

import pytest

from hypar_sim.paper import FIGURE_8_GB as FIGURE_8
from hypar_sim.paper import VGG_B_HYPAR_GB_CONSISTENT
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.kinds import paper_label
from hypar_sim.partition.steps import Phase
from hypar_sim.planner.comm_model import LayerSplit, Parallelism, layer_transfers, pair_costs
from hypar_sim.planner.plan import evaluate_plan, make_plan
from hypar_sim.workload.layers import FeatureShape, make_conv, make_fc
from hypar_sim.workload.network import as_graph, load_network
from tests.conftest import PAPER

DP, MP = Parallelism.DP, Parallelism.MP


def test_worked_example_fc():
    """Section 3.4: FC 70 -> 100, batch 32: dp 56 KB, mp 25.6 KB."""
    layer = make_fc("fc", FeatureShape(70, 1, 1), 100)
    split = LayerSplit(layer, 32)
    assert sum(pair_costs(split, None, DP)) == 2 * 70 * 100 * 4 == 56_000
    assert sum(pair_costs(split, None, MP)) == 2 * 32 * 100 * 4 == 25_600


def test_worked_example_conv():
    """Section 3.4: conv 12x12x20 -> 8x8x50 with 5x5 kernels, batch 32: dp 200 KB, mp 819 KB."""
    layer = make_conv("conv", FeatureShape(20, 12, 12), 50, 5)
    split = LayerSplit(layer, 32)
    assert sum(pair_costs(split, None, DP)) == 200_000
    assert sum(pair_costs(split, None, MP)) == 819_200


def test_transitions():
    layer = make_fc("fc", FeatureShape(64, 1, 1), 10)
    split = LayerSplit(layer, 8)
    # dp -> mp: 2 x (0.25 A(F_l) + 0.25 A(E_l)) on the mp layer's own input
    assert pair_costs(split, DP, MP) == (2 * 8 * 10 * 4, 8 * 64 * 4)
    for previous, choice in ((DP, DP), (MP, MP), (MP, DP)):
        assert pair_costs(split, previous, choice)[1] == 0


@pytest.mark.parametrize("previous", [None, DP, MP])
@pytest.mark.parametrize("choice", [DP, MP])
def test_pair_costs_are_the_sums_of_the_transfers(previous, choice):
    """The planner's closed form equals the messages' transfers, both directions."""
    layer = make_conv("conv", FeatureShape(20, 12, 12), 50, 5)
    split = LayerSplit(layer, 24, 0.25)
    for forward in (False, True):  # a training step; inference (the forward pass alone)
        sent = [t for t in layer_transfers(split, previous, choice)
                if not forward or t.phase is Phase.FORWARD]
        intra = sum(2 * t.bytes_per_direction for t in sent if t.kind.is_intra)
        inter = sum(2 * t.bytes_per_direction for t in sent if not t.kind.is_intra)
        assert pair_costs(split, previous, choice, forward) == (intra, inter)


@pytest.mark.parametrize("name", sorted(FIGURE_8))
def test_figure8_data_and_hypar_within_1_percent(name):
    net = load_network(name)
    _, data_gb, hypar_gb = FIGURE_8[name]
    data = make_plan(net, "data", 4, 256, options=PAPER).traffic_bytes / 1e9
    hypar = make_plan(net, "hypar", 4, 256, options=PAPER).traffic_bytes / 1e9
    assert data == pytest.approx(data_gb, rel=0.01)
    if name == "vgg_b":  # the printed 1.47 cannot be right; see hypar_sim/paper.py
        assert hypar == pytest.approx(VGG_B_HYPAR_GB_CONSISTENT, rel=0.01)
    else:
        assert hypar == pytest.approx(hypar_gb, rel=0.01)


def test_data_parallelism_formula():
    """DP = 2 x (1+2+4+8) x weights x 4 bytes."""
    for name in ("sfc", "vgg_a", "lenet_c"):
        net = load_network(name)
        assert make_plan(net, "data", 4, 256, options=PAPER).traffic_bytes == 2 * 15 * net.weights * 4


def test_standard_alexnet_is_not_the_papers():
    assert make_plan(load_network("alexnet"), "data", 4, 256, options=PAPER).traffic_bytes / 1e9 == \
        pytest.approx(7.48, rel=0.01)


def _plan(name):
    return [[paper_label(c) for c in level] for level in make_plan(load_network(name), "hypar", 4,
                                                                   256, options=PAPER).choices]


def test_section_621_plans():
    sfc = _plan("sfc")
    assert sfc[2][0] == "dp"
    assert all(c == "mp" for h, level in enumerate(sfc) for i, c in enumerate(level)
               if (h, i) != (2, 0))
    assert all(c == "dp" for level in _plan("sconv") for c in level)
    lenet = _plan("lenet_c")
    assert lenet[0] == lenet[3] == ["dp", "dp", "mp", "mp"]
    net = load_network("vgg_a")
    vgg = _plan("vgg_a")
    conv5_2, fc1 = net.layer_names.index("conv5_2"), net.layer_names.index("fc1")
    assert [level[conv5_2] for level in vgg] == ["dp", "dp", "dp", "mp"]
    assert [level[fc1] for level in vgg] == ["mp"] * 4


def test_hypar_never_worse_than_data_model_trick():
    for name in FIGURE_8:
        net = load_network(name)
        hypar = make_plan(net, "hypar", 4, 256, options=PAPER).traffic_bytes
        for other in ("data", "model", "trick"):
            assert hypar <= make_plan(net, other, 4, 256, options=PAPER).traffic_bytes * (1 + 1e-12)


def test_trick_plan():
    plan = make_plan(load_network("alexnet_half"), "trick", 2, 256, options=PAPER)
    assert list(plan.choices[0]) == ["batch"] * 5 + ["in"] * 3


def test_traffic_is_sum_of_levels_and_layers():
    plan = make_plan(load_network("vgg_a"), "hypar", 4, 256, options=PAPER)
    per_layer = sum(plan.node_bytes)
    assert plan.traffic_bytes == per_layer == pytest.approx(sum(plan.traffic_bytes_per_level),
                                                            rel=1e-12)


def test_zero_levels_has_no_traffic():
    plan = make_plan(load_network("lenet_c"), "hypar", 0, 256, options=PAPER)
    assert plan.traffic_bytes == 0 and plan.choices == ()


def test_data_traffic_independent_of_batch():
    net = load_network("cifar_c")
    assert make_plan(net, "data", 3, 64, options=PAPER).traffic_bytes == \
        make_plan(net, "data", 3, 512, options=PAPER).traffic_bytes


def test_exhaustive_strategy_is_the_global_optimum():
    net = load_network("lenet_c")
    exhaustive = make_plan(net, "exhaustive", 2, 64, options=PAPER)
    hypar = make_plan(net, "hypar", 2, 64, options=PAPER)
    graph, hierarchy = as_graph(net), Hierarchy.binary(2)
    columns = itertools.product(("batch", "in"), repeat=2)
    cost = min(evaluate_plan(graph, "x", "", 64, hierarchy, plan, traffic_model="paper")
               .traffic_bytes for plan in itertools.product(columns, repeat=len(net.layers)))
    assert exhaustive.traffic_bytes == cost <= hypar.traffic_bytes
