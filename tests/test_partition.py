"""The partition algebra: hierarchies, kinds, shares, the redistribution rule, and plans and
simulations with every kind on arrays of any size (`--traffic-model layout`)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hypar_sim.errors import InputError
from hypar_sim.hardware.config import load_hardware
from hypar_sim.hardware.costs import phase_cost
from hypar_sim.partition.axes import sites as graph_sites
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.kinds import KINDS, Dim, SplitKind, register_kind, unregister_kind
from hypar_sim.partition.node_layout import (
    FORWARD_STAGES,
    edge_matrices,
    layout,
    offered,
    own_matrices,
)
from hypar_sim.partition.redistribute import _bounds
from hypar_sim.partition.regions import flat_boxes, member_boxes, member_regions, region
from hypar_sim.partition.shares import column_shares, member_intervals, whole_share
from hypar_sim.partition.steps import Phase, TransferKind
from hypar_sim.planner.options import PlanOptions
from hypar_sim.planner.plan import make_plan
from hypar_sim.planner.plan_messages import graph_layouts, graph_matrices
from hypar_sim.runner import SimOptions, simulate
from hypar_sim.sim.schedule import build_schedule
from hypar_sim.workload.graph import parse_graph
from hypar_sim.workload.layers import FeatureShape, make_conv, make_fc
from hypar_sim.workload.network import Network, as_graph, load_network, load_workload
from tests.conftest import assert_sent_equals_received_equals
from tests.test_planner_properties import networks

LAYOUT = "layout"


def mlp() -> Network:
    """A transformer's MLP as two fc layers: 4096 -> 16384 -> 4096."""
    first = make_fc("fc1", FeatureShape(4096, 1, 1), 16384)
    return Network("mlp", FeatureShape(4096, 1, 1), (first, make_fc("fc2", first.output, 4096)))


def steps_total(steps):
    return {key: float(matrix.sum()) for key, matrix in steps.items() if matrix.sum()}


def _sites(*layers):
    """The chain of `layers` as a graph's nodes (`network.as_graph`)."""
    graph = as_graph(Network("chain", layers[0].input, tuple(layers)))
    return graph, graph_sites(graph)


def chain_transfers(layers, batch, columns, hierarchy, word_bytes):
    """Bytes [src, dst] of every step of a chain's plan, by the cell rule on its graph."""
    graph, _ = _sites(*layers)
    return graph_matrices(graph, graph_layouts(graph, batch, hierarchy, columns), batch,
                          word_bytes)


def _stages(matrices, forward_only):
    return sum(float(m.sum()) for stage, m in matrices.items()
               if not forward_only or stage in FORWARD_STAGES)


def cell_own_cost(layer, batch, column, hierarchy, word_bytes, last, forward_only=False):
    """The cell rule's bytes that depend on one column: the gradient, the loss if last (with
    `forward_only`, the forward pass's transfers alone)."""
    _, (site,) = _sites(layer)
    return _stages(own_matrices(layout(site, batch, column, hierarchy), batch, word_bytes,
                                last), forward_only)


def cell_boundary_cost(producer, consumer, batch, producer_column, consumer_column, hierarchy,
                       word_bytes, forward_only=False):
    """The cell rule's bytes across one boundary, forward and backward (or forward only)."""
    _, (made, read) = _sites(producer, consumer)
    return _stages(edge_matrices(layout(made, batch, producer_column, hierarchy),
                                 layout(read, batch, consumer_column, hierarchy), 0, batch,
                                 word_bytes), forward_only)


# --- hierarchies and shares ---------------------------------------------------------------

def test_hierarchy_defaults_parse_and_groups():
    assert Hierarchy.for_count(12).sizes == (3, 2, 2)
    assert Hierarchy.for_count(16).sizes == (2, 2, 2, 2)
    assert Hierarchy.for_count(1).sizes == ()
    h = Hierarchy.parse("4x3x2", 24)
    assert h.coords(23) == (3, 2, 1) and h.coords(7) == (1, 0, 1)
    assert h.group(7, 0) == (1, 7, 13, 19) and h.group(7, 1) == (7, 9, 11)
    assert sorted(m for g in h.groups(1) for m in g) == list(range(24))
    binary = Hierarchy.binary(4)
    for level in range(4):  # HyPar's pairs: a and a ^ 2**(H-h-1)
        assert all(binary.group(a, level) == tuple(sorted((a, a ^ 2 ** (3 - level))))
                   for a in range(16))
    with pytest.raises(InputError, match="has 16 members, but there are 12"):
        Hierarchy.parse("4x4", 12)
    with pytest.raises(InputError, match="not a list of level sizes"):
        Hierarchy.parse("4by3")


def test_uneven_batch_shares_and_the_slowest_member():
    """Batch 100 on 16: shares of 7 and 6 samples; the slowest member computes 7."""
    parts = member_intervals(100, ("batch",) * 4, Hierarchy.binary(4), Dim.N)
    assert (parts[:, 1] - parts[:, 0]).tolist() == [7] * 4 + [6] * 12
    assert parts[0, 0] == 0 and (parts[1:, 0] == parts[:-1, 1]).all() and parts[-1, 1] == 100
    net = load_network("sfc")
    config = load_hardware()
    plan = make_plan(net, "data", 4, 100, options=PlanOptions(traffic_model=LAYOUT))
    schedule = build_schedule(net, plan, config)
    assert set(plan.layouts[0].box_sizes()[:, 0].tolist()) == {6, 7}  # N, samples
    forward = next(t for t in schedule.tasks if getattr(t, "phase", None) is Phase.FORWARD)
    seven = phase_cost(whole_share(net.layers[0], 7), Phase.FORWARD, config)
    assert max(cost.cycles for cost in forward.costs) == seven.cycles
    result = simulate(net, plan, config, SimOptions(topology="ideal"))
    busy = [item.busy_cycles for item in result.per_accelerator]
    assert max(busy) > min(busy)  # the stragglers are visible


def test_flat_boxes_cover_the_range_exactly():
    boxes = flat_boxes(5, 23, (3, 2, 4))
    cells = {(c, r, q) for (c0, c1), (r0, r1), (q0, q1) in boxes
             for c in range(c0, c1) for r in range(r0, r1) for q in range(q0, q1)}
    assert sorted(c * 8 + r * 4 + q for c, r, q in cells) == list(range(5, 23))


# --- the redistribution rule against hand computations ------------------------------------

def test_mlp_out_then_in_moves_nothing_between_the_layers():
    """fc 4096 -> 16384 -> 4096, batch 8, 2 accelerators: the planner picks out then in;
    only the second layer's partial outputs (reduce-scattered forward) and its error
    (gathered backward) move: 2 x 8 x 4096 x 4 B = 262,144 B."""
    options = PlanOptions(kinds=("batch", "in", "out"), traffic_model=LAYOUT)
    for search in ("greedy", "joint"):
        plan = make_plan(mlp(), "hypar", Hierarchy((2,)), 8,
                         options=PlanOptions(options.kinds, search, LAYOUT))
        assert plan.choices == (("out", "in"),)
        assert plan.traffic_bytes == 262_144
    steps = steps_total(chain_transfers(mlp().layers, 8, (("out",), ("in",)), Hierarchy((2,)), 4))
    assert steps == {(1, TransferKind.PARTIAL_SUM): 131_072.0,
                     (1, TransferKind.ERROR_GATHER): 131_072.0}


def test_one_two_way_level_gives_hypars_tables():
    """Without pooling, per direction: batch layer A(dW); in layer A(F'); batch -> in
    A(F)/4 forward and A(E)/4 backward (HyPar Tables 1 and 2)."""
    first = make_fc("a", FeatureShape(64, 1, 1), 32)
    second = make_fc("b", first.output, 16)
    layers, pair = (first, second), Hierarchy((2,))
    grad = 64 * 32 * 4
    out_bytes = 8 * 16 * 4  # A(F') of b, batch 8
    in_bytes = 8 * 32 * 4  # A(F) of b
    steps = steps_total(chain_transfers(layers, 8, (("batch",), ("in",)), pair, 4))
    assert steps[(0, TransferKind.GRADIENT)] + steps[(0, TransferKind.GRADIENT_GATHER)] \
        == 2 * grad
    assert steps[(1, TransferKind.RELAYOUT_FEATURE)] == 2 * in_bytes / 4
    assert steps[(0, TransferKind.ERROR_GATHER)] == 2 * in_bytes / 4
    assert steps[(1, TransferKind.PARTIAL_SUM)] + steps[(1, TransferKind.ERROR_GATHER)] \
        == 2 * out_bytes
    assert set(steps) == {(0, TransferKind.GRADIENT), (0, TransferKind.GRADIENT_GATHER),
                          (1, TransferKind.RELAYOUT_FEATURE), (0, TransferKind.ERROR_GATHER),
                          (1, TransferKind.PARTIAL_SUM), (1, TransferKind.ERROR_GATHER)}
    # in -> batch and in -> in: only the in layer's own A(F') per direction
    for second_kind in ("batch", "in"):
        steps = steps_total(chain_transfers(layers, 8, (("in",), (second_kind,)), pair, 4))
        boundary = sum(v for (layer, kind), v in steps.items() if layer == 0
                       and kind in (TransferKind.PARTIAL_SUM, TransferKind.ERROR_GATHER))
        assert boundary == 2 * in_bytes
        assert (1, TransferKind.RELAYOUT_FEATURE) not in steps


def test_spatial_halo_equals_a_hand_computation():
    """3x3 conv, pad 1, on 8 rows split into two halves of 4: each half reads one row of
    its neighbour forward (4 channels x 8 columns x 2 samples x 4 B = 256 B) and sends
    it one partial error row backward; the weight gradient is all-reduced."""
    first = make_conv("c1", FeatureShape(4, 8, 8), 4, 3, 1, 1)
    second = make_conv("c2", first.output, 4, 3, 1, 1)
    steps = chain_transfers((first, second), 2, (("spatial",), ("spatial",)), Hierarchy((2,)), 4)
    row = 4 * 8 * 2 * 4
    assert steps[(1, TransferKind.RELAYOUT_FEATURE)].dense().tolist() == [[0, row], [row, 0]]
    assert steps[(1, TransferKind.ERROR_REDUCE)].dense().tolist() == [[0, row], [row, 0]]
    assert (0, TransferKind.ERROR_GATHER) not in {k for k, m in steps.items() if m.sum()}
    weights = 4 * 4 * 9 * 4
    assert steps[(0, TransferKind.GRADIENT)].sum() == steps[(0, TransferKind.GRADIENT_GATHER)] \
        .sum() == weights


def test_three_way_gradient_all_reduce_bytes():
    """Batch over 3 members: each sends (k-1)/k of the gradient in the reduce-scatter and
    again in the all-gather (a ring's totals)."""
    layer = make_fc("f", FeatureShape(30, 1, 1), 6)
    steps = chain_transfers((layer,), 9, (("batch",),), Hierarchy((3,)), 4)
    weights_bytes = 30 * 6 * 4
    for kind in (TransferKind.GRADIENT, TransferKind.GRADIENT_GATHER):
        sent = steps[(0, kind)].dense().sum(axis=1)
        assert sent.tolist() == pytest.approx([2 / 3 * weights_bytes] * 3)


# --- a fifth kind, registered here ----------------------------------------------------------

@pytest.fixture
def cols_kind():
    register_kind(SplitKind("cols", Dim.Q, "output columns, with a halo (test kind)"))
    yield "cols"
    unregister_kind("cols")


def test_a_registered_kind_is_planned_and_simulated(cols_kind):
    net = load_network("cifar_c")
    config = load_hardware()
    options = PlanOptions(kinds=("batch", "cols"), traffic_model=LAYOUT)
    plan = make_plan(net, "explicit", Hierarchy((2, 2)), 16,
                     "cols cols cols batch batch; batch batch batch batch batch", options=options)
    result = simulate(net, plan, config, SimOptions(topology="htree"))
    assert result.traffic_bytes == pytest.approx(plan.traffic_bytes)
    assert result.latency_cycles > 0
    searched = make_plan(net, "hypar", Hierarchy((2, 2)), 16,
                         options=PlanOptions(("batch", "cols"), "joint", LAYOUT))
    assert searched.traffic_bytes <= plan.traffic_bytes
    assert "cols" in KINDS


# --- invariants over random networks, kinds and hierarchies -------------------------------

@settings(max_examples=30, deadline=None)
@given(net=networks(max_layers=4, max_channels=12, max_size=10, max_out=24),
       sizes=st.sampled_from([(2,), (3,), (2, 2), (3, 2), (2, 3), (2, 2, 2)]),
       kinds=st.sets(st.sampled_from(["batch", "in", "out", "spatial"]), min_size=1),
       batch=st.integers(8, 13), topology=st.sampled_from(["htree", "torus", "ideal"]),
       model=st.sampled_from([LAYOUT, "layout_levels"]))
def test_bytes_sent_equal_received_equal_planner_traffic(net, sizes, kinds, batch, topology,
                                                         model):
    hierarchy = Hierarchy(sizes)
    options = PlanOptions(kinds=tuple(k for k in KINDS if k in kinds | {"batch"}),
                          traffic_model=model)
    plan = make_plan(net, "hypar", hierarchy, batch, options=options)
    config = load_hardware()
    schedule = build_schedule(net, plan, config)
    sent = assert_sent_equals_received_equals(schedule, plan.traffic_bytes)
    result = simulate(net, plan, config, SimOptions(topology=topology))
    assert result.traffic_bytes == pytest.approx(plan.traffic_bytes, rel=1e-12, abs=1e-6)
    assert sum(result.energy_breakdown_pj.values()) == pytest.approx(result.energy_pj)
    assert [a.sent_bytes for a in result.per_accelerator] == \
        pytest.approx([sent[m] for m in range(hierarchy.members)], rel=1e-12)


@pytest.mark.parametrize("count, topology", [(6, "torus"), (12, "htree"), (24, "ideal"),
                                             (12, "torus"), (24, "htree"), (6, "ideal")])
def test_any_array_size_runs_end_to_end(count, topology):
    net = load_network("lenet_c")
    config = load_hardware()
    plan = make_plan(net, "hypar", Hierarchy.for_count(count), 100,
                     options=PlanOptions(("batch", "in", "out"), "greedy", LAYOUT))
    des = simulate(net, plan, config, SimOptions(topology=topology))
    analytic = simulate(net, plan, config, SimOptions(topology=topology, engine="analytic"))
    assert des.traffic_bytes == pytest.approx(plan.traffic_bytes)
    assert des.latency_cycles > 0 and analytic.latency_cycles > 0
    assert len(des.per_accelerator) == count


def test_layout_shares_cover_every_index_once():
    layer = make_conv("c", FeatureShape(6, 14, 14), 10, 3, padding=1)
    hierarchy = Hierarchy((3, 2, 2))
    shares = column_shares(layer, 10, ("out", "spatial", "batch"), hierarchy)
    macs = sum(s.batch * s.kernels * s.channels * (s.out_rows[1] - s.out_rows[0]) *
               (s.out_cols[1] - s.out_cols[0]) for s in shares)
    assert macs == 10 * layer.output.size * layer.input.channels


# --- the command line ----------------------------------------------------------------------

def test_cli_plan_kinds_hierarchy_and_models(cli):
    paper = json.loads(cli("plan", "vgg_a", "--traffic-model", "paper", "--json").stdout)
    assert paper["traffic_bytes"] / 1e9 == pytest.approx(1.469, abs=5e-4)
    assert paper["plan"][3][7] == "in" and paper["traffic_model"] == "paper"
    layout = json.loads(cli("plan", "vgg_a", "--kinds", "dp,mp,out", "--json").stdout)
    assert layout["traffic_model"] == "layout" and layout["hierarchy"] == [2, 2, 2, 2]
    three = json.loads(cli("plan", "lenet_c", "--accelerators", "24", "--hierarchy", "4x3x2",
                           "--json").stdout)
    assert three["hierarchy"] == [4, 3, 2] and three["accelerators"] == 24


@pytest.mark.parametrize("args, fragment", [
    (("plan", "vgg_a", "--kinds", "rows"), "--kinds: unknown split kind 'rows'"),
    (("plan", "sfc", "--kinds", "spatial"), "no kind of spatial can split node fc1"),
    (("plan", "vgg_a", "--accelerators", "12", "--hierarchy", "4x4"),
     "--hierarchy: 4x4 has 16 members, but there are 12 accelerators"),
    (("plan", "vgg_a", "--traffic-model", "paper", "--kinds", "batch,out"),
     "--traffic-model: paper takes only kinds batch,in"),
    (("plan", "vgg_a", "--traffic-model", "paper", "--accelerators", "12"),
     "--traffic-model: paper takes only kinds batch,in"),
    (("plan", "lenet_c", "--levels", "1", "--plan", "in batch batch batch"),
     "--plan: node conv1 (conv, output [20, 12, 12]) cannot take (in)"),
    (("plan", "vgg_a", "--search", "both"), "invalid choice: 'both'"),
    (("run", "vgg_a", "--traffic-model", "exact"), "invalid choice: 'exact'"),
])
def test_bad_partition_input_is_one_line_exit_2(cli, args, fragment):
    result = cli(*args)
    assert result.returncode == 2, result.stderr
    assert fragment in result.stderr and result.stderr.count("\n") == 1
    assert "Traceback" not in result.stderr and result.stdout == ""


@settings(max_examples=25, deadline=None)
@given(net=networks(max_layers=2, max_channels=8, max_size=9, max_out=12),
       sizes=st.sampled_from([(2,), (3,), (2, 2), (3, 2), (2, 3)]), batch=st.integers(4, 9),
       pooled=st.booleans())
def test_closed_form_totals_equal_the_cell_rule(net, sizes, batch, pooled):
    """`partition.totals` (what the searches use) against `partition.layout`'s transfers,
    for every pair of columns of two adjacent layers (every kind, pooling included), for a
    training step and for the forward pass alone."""
    import itertools

    from hypar_sim.partition import totals
    from hypar_sim.planner.traffic import traffic_model
    from hypar_sim.workload.layers import Pool

    first = net.layers[0]
    if pooled and first.kind.value == "conv" and first.conv_output.height >= 3:
        first = make_conv(first.name, first.input, first.conv_output.channels, first.kernel,
                          padding=first.padding, pool=Pool(3, 2))
    second = (make_fc("next", first.output, 7) if len(net.layers) == 1 or first is not
              net.layers[0] else net.layers[1])
    hierarchy, model = Hierarchy(sizes), traffic_model(LAYOUT)
    kinds = [k for k in KINDS if k in ("batch", "in", "out", "spatial")]

    def columns(layer):
        return [c for c in itertools.product(kinds, repeat=len(sizes))
                if model.offered(layer, batch, c, hierarchy)]

    ps, qs = columns(first), columns(second)
    for forward in (False, True):  # a training step; inference (the forward pass alone)
        fast = totals.boundary_costs(first, second, batch, ps, qs, hierarchy, 4, forward)
        for i, p in enumerate(ps):
            for j, q in enumerate(qs):
                assert fast[i, j] == pytest.approx(cell_boundary_cost(
                    first, second, batch, p, q, hierarchy, 4, forward), abs=1e-6)
        for last in (False, True):
            own = totals.own_costs(second, batch, qs, hierarchy, 4, last, forward)
            assert own == pytest.approx([cell_own_cost(second, batch, q, hierarchy, 4, last,
                                                       forward) for q in qs], abs=1e-6)


def test_three_way_ring_uses_only_its_successor_links():
    """Batch over a 3-way level (1 x 3 torus): the gradient reduce-scatter and all-gather are
    rings: 2 rounds, each member sending b = weights / 3 to its successor, so the links
    A0>A1, A1>A2, A2>A0 each carry 2 b per phase and the reverse links nothing; bytes as a
    direct exchange's."""
    layer = make_fc("f", FeatureShape(30, 1, 1), 6)
    net = Network("one", layer.input, (layer,))
    config = load_hardware()
    plan = make_plan(net, "data", Hierarchy((3,)), 9, options=PlanOptions(traffic_model=LAYOUT))
    schedule = build_schedule(net, plan, config)
    b = 30 * 6 * 4 / 3
    for kind in (TransferKind.GRADIENT, TransferKind.GRADIENT_GATHER):
        messages = schedule.steps[(0, kind)]
        assert sorted((m.src, m.dst, m.round) for m in messages) == \
            [(0, 1, 0), (0, 1, 1), (1, 2, 0), (1, 2, 1), (2, 0, 0), (2, 0, 1)]
        assert all(m.bytes == pytest.approx(b) for m in messages)
    for engine in ("des", "analytic"):
        result = simulate(net, plan, config, SimOptions(topology="torus", engine=engine))
        carried = {link.link: link.bytes for link in result.per_link}
        assert carried == pytest.approx({"A0>A1": 4 * b, "A1>A2": 4 * b, "A2>A0": 4 * b,
                                         "A0>A2": 0.0, "A1>A0": 0.0, "A2>A1": 0.0})
    torus = simulate(net, plan, config, SimOptions(topology="torus"))
    ideal = simulate(net, plan, config, SimOptions(topology="ideal"))
    assert torus.latency_cycles > ideal.latency_cycles  # the rounds take link time


def sliced_graph():
    """A slice of a token stream's channels (a shifted range, unclipped), concatenated with
    the stream: an fc reads both."""
    return parse_graph({"inputs": {"x": [8, 6]}, "nodes": [
        {"name": "s", "type": "slice", "axis": 1, "start": 2, "stop": 5},
        {"name": "cat", "type": "concat", "inputs": ["s", "x"], "axis": 1},
        {"name": "fc", "type": "fc", "out_features": 4}]}, "sliced")


@pytest.mark.parametrize("name", ["inception_v1", "mobilenet_v2", "resnet50", "alexnet",
                                  "gpt2_small", "sliced"])
def test_every_members_region_at_once_equals_each_members_own(name):
    """`member_regions` (every member's region of a tensor as arrays over the members)
    equals `region` of each member's box: on every node of networks with concatenations
    and slices (shifted ranges, clipped and not), grouped convolutions, folded poolings
    (windows of windows), strided windows, flattened maps and attention's reshapes, for the
    output and every input, under mixed columns on 12 members (uneven shares among them);
    and for boxes with empty intervals, which no offered column gives."""
    graph = load_workload(name, 64, {"layers": 1}) if name.startswith("gpt") else \
        sliced_graph() if name == "sliced" else load_workload(name)
    hierarchy, batch = Hierarchy((2, 3, 2)), 6
    columns = [("batch", "out", "in"), ("out", "in", "batch"), ("in", "spatial", "out"),
               ("groups", "batch", "out"), ("heads", "batch", "out"), ("spatial", "spatial",
                                                                       "spatial"),
               ("replicate", "out", "in")]
    checked, key_of, regions_of = 0, {}, {}
    for site in graph_sites(graph):
        for column in columns:
            if not offered(site, batch, column, hierarchy):
                continue
            own = layout(site, batch, column, hierarchy)
            for access in (site.desc.makes, *site.desc.reads):
                regions = member_regions(access, own.boxes)
                assert regions == tuple(region(access, own.box(m)) for m in range(own.members))
                checked += 1
                arrays = member_boxes(access, own.boxes)
                if arrays is None:
                    continue
                # the arrays' boxes are the regions', and equal keys mean equal regions
                expected = _bounds(regions, len(access.axes) + 1)
                assert all(np.array_equal(a, b) for a, b in zip(arrays.owned(), expected,
                                                                strict=True))
                assert key_of.setdefault(regions, arrays.key) == arrays.key
                assert regions_of.setdefault(arrays.key, regions) == regions
    assert checked > 2 * len(graph.nodes) and len(key_of) > len(graph.nodes)
    for site in graph_sites(graph):  # member 1's intervals all empty
        boxes = {dim: np.array([[0, extent], [0, 0]]) for dim, extent in
                 {**site.desc.loops, Dim.N: batch}.items()}
        for access in (site.desc.makes, *site.desc.reads):
            assert member_regions(access, boxes) == tuple(
                region(access, {d: tuple(b[m]) for d, b in boxes.items()}) for m in range(2))
