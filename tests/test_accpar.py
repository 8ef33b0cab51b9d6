"""AccPar's planner (hypar_sim.planner.accpar): its tables recovered from the tensors' layouts,
costs by hand, brute force on chains and on a two-branch graph, and where its plan differs
from hypar's."""

from __future__ import annotations

import itertools

import pytest

import hypar_sim
from hypar_sim.errors import InputError
from hypar_sim.hardware.config import load_hardware
from hypar_sim.partition import layout_costs, node_layout
from hypar_sim.partition.axes import sites as graph_sites
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.planner import accpar
from hypar_sim.planner.accpar import TYPES, Hardware, Shares, node_shares, plan_cost, plan_levels
from hypar_sim.planner.options import PlanOptions
from hypar_sim.planner.plan import PlanRequest, make_plan
from hypar_sim.planner.strategies import STRATEGIES
from hypar_sim.workload.graph import parse_graph
from hypar_sim.workload.layers import FeatureShape, Layer, Pool, make_conv, make_fc
from hypar_sim.workload.network import Network, graph_of, load_network
from tests.conftest import small_chain

ALL = ("batch", "in", "out")
DEFAULT = Hardware.from_config(load_hardware())
SLOW_LINK = Hardware(1e6, 100.0)  # 4-byte words: 0.04 s an element
WHOLE = Hierarchy(())


def _graph(*layers: Layer):
    """A chain of layers as a graph (`graph_of`)."""
    return graph_of(Network("test", layers[0].input, tuple(layers)))


def _fcs(*widths: int, inputs: int = 6):
    """A chain of fc layers (no biases) as a graph."""
    nodes = [{"name": f"f{i + 1}", "type": "fc", "out_features": w} for i, w in enumerate(widths)]
    return parse_graph({"inputs": {"x": [inputs]}, "nodes": nodes}, "fcs")


def _branches():
    """fc a, read by an fc (b1) and an activation (b2) whose outputs an add joins; fc o."""
    return parse_graph({"inputs": {"x": [6]}, "nodes": [
        {"name": "a", "type": "fc", "out_features": 4},
        {"name": "b1", "type": "fc", "out_features": 4, "inputs": ["a"]},
        {"name": "b2", "type": "act", "function": "relu", "inputs": ["a"]},
        {"name": "s", "type": "add", "inputs": ["b1", "b2"]},
        {"name": "o", "type": "fc", "out_features": 2}]}, "branches")


def _model(graph, batch: int, hardware: Hardware = DEFAULT) -> accpar._Model:
    return accpar._Model(graph, graph_sites(graph), batch, hardware, 4)


def _options(graph, batch, hierarchy, fixed_top=None):
    """Every node's offered columns (under `fixed_top`'s upper kinds, if given)."""
    result = []
    for i, site in enumerate(graph_sites(graph)):
        tops = [fixed_top[i][:1]] if fixed_top else [(k,) for k in ALL]
        result.append([top + rest for top in tops
                       for rest in itertools.product(ALL, repeat=hierarchy.levels - len(top))
                       if node_layout.offered(site, batch, top + rest, hierarchy)])
    return result


def test_registered_with_its_own_cost_only():
    """The graph planner under the plain name, its paper's three types by default, bytes only
    (its own cost), and not under HyPar's reading of a chain (`--traffic-model paper`)."""
    spec = STRATEGIES["accpar"]
    assert spec.columns is accpar.accpar_columns
    assert spec.searches and spec.objectives == ("bytes",) and spec.own_cost == "its time"
    assert spec.default_kinds == ALL
    assert dict(TYPES) == {"batch": "Type-I", "in": "Type-II", "out": "Type-III"}
    lenet = load_network("lenet_c")
    with pytest.raises(InputError, match="strategy 'accpar' takes bytes"):
        make_plan(graph_of(lenet), "accpar", Hierarchy((2,)), 64,
                  options=PlanOptions(objective="time"))
    with pytest.raises(InputError, match="strategy accpar plans by its own paper's cost"):
        make_plan(lenet, "accpar", 1, 64, options=PlanOptions(traffic_model="paper"))


def test_hardware_numbers_from_the_config():
    """Peak: 32 PUs x 168 PEs x 250 MHz, one MAC per PE a cycle; one link: 1.6 Gb/s = 0.2 GB/s."""
    assert DEFAULT.macs_per_s == 32 * 168 * 250e6
    assert DEFAULT.link_bytes_per_s == 0.2e9
    with pytest.raises(InputError, match="must be positive"):
        Hardware(1.0, 0.0)


def test_request_hardware_defaults_to_this_array():
    """A request without a config: the default config at its word size."""
    graph = graph_of(load_network("lenet_c"))
    request = PlanRequest(graph, graph_sites(graph), 64, Hierarchy((2, 2)), ALL, "greedy",
                          layout_costs.Costs(64, 4), [], 4)
    assert accpar.request_hardware(request) == DEFAULT


def test_one_fc_layer_by_hand():
    """fc 6 -> 4, batch 8, two cubes of 1e6 MAC/s, links of 100 B/s, 4-byte words. Each type
    leaves one partial sum, exchanged whole at k = 2: Type-I dW (24 elements), Type-II F_{l+1}
    (8 x 4 = 32), Type-III E_l (8 x 6 = 48), 0.04 s an element. Every type computes half of
    3 x 8 x 6 x 4 = 576 MACs on one cube: 288 us."""
    graph, hierarchy = _fcs(4), Hierarchy((2,))
    assert node_shares(graph_sites(graph)[0], 8, (), WHOLE) == Shares(32, (48,), 24, 1.0)
    for kind, elements in (("batch", 24), ("in", 32), ("out", 48)):
        cost = plan_cost(graph, 8, [(kind,)], hierarchy, SLOW_LINK)
        assert cost.communication_s == pytest.approx((elements * 0.04,))
        assert cost.computation_s == pytest.approx((288e-6,))
    assert plan_levels(graph, 8, hierarchy, ALL, SLOW_LINK).columns == (("batch",),)


def test_uneven_shares_compute_longer():
    """conv 3 -> 4 channels, 3x3 on 6x6 (padding 1), 2x2 pooling, batch 2: 3 x 2 x 3 x 4 x 36 x
    9 = 23,328 MACs. Halving the batch or K leaves 11,664; C = 3 splits 2 + 1, so the in-split's
    heavier member computes 2/3: 15,552. Type-II exchanges the pooled output (2 x 4 x 9 = 72)."""
    layer = make_conv("conv", FeatureShape(3, 6, 6), 4, 3, padding=1, pool=Pool(2, 2))
    graph, hierarchy = _graph(layer), Hierarchy((2,))
    whole = node_shares(graph_sites(graph)[0], 2, (), WHOLE)
    assert whole == Shares(72, (216,), 108, 1.0)
    model = _model(graph, 2, Hardware(1.0, 1.0))
    assert [model.compute_seconds(0, (kind,), hierarchy, hierarchy) for kind in ALL] == \
        pytest.approx([11_664, 15_552, 11_664])
    assert model.intra_elements(0, "in", 2, whole) == 72


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
    """fc -> fc, a 36 x 36 F_l and E_l (batch 36): every edge's receipt is the inter-layer
    table's entry counted cell by cell, what one member needs minus what it holds (F_l: the
    producer leaves it, the consumer reads it; E_l: the consumer leaves it, the producer reads
    it). At k = 2 these are the authors' numbers (1/4 (A(F) + A(E)), 1/2 A(F), 1/2 A(E), 0)."""
    n = d = 36
    model = _model(_fcs(d, 5, inputs=36), n)
    for before, kind in itertools.product(ALL, ALL):
        f_held, f_need = _cells(PRODUCER[before], k, n, d), _cells(CONSUMER[kind], k, n, d)
        e_held, e_need = _cells(CONSUMER[kind], k, n, d), _cells(PRODUCER[before], k, n, d)
        (receipt,) = {len(f_need[m] - f_held[m]) + len(e_need[m] - e_held[m]) for m in range(k)}
        assert model.edge_fraction(0, 1, 0, before, kind, k) * n * d == pytest.approx(
            receipt), (before, kind)
    if k == 2:
        area = n * d
        assert [model.edge_fraction(0, 1, 0, b, a, 2) * area for b in ALL for a in ALL] == \
            pytest.approx([0, area / 2, area / 2, area / 2, area / 2, 0, area / 2, 0, area / 2])


def test_intra_layer_all_reduce_factors():
    """fc 6 -> 4, batch 9: dW 24, F_{l+1} 36, E_l 54 elements. k = 2: each member receives the
    other's whole partial sum (A); k = 3: a ring's reduce-scatter and all-gather, 2 x 2/3 A."""
    graph = _fcs(4)
    model, whole = _model(graph, 9), node_shares(graph_sites(graph)[0], 9, (), WHOLE)
    assert [model.intra_elements(0, kind, 2, whole) for kind in ALL] == [24, 36, 54]
    assert [model.intra_elements(0, kind, 3, whole) for kind in ALL] == \
        pytest.approx([32, 48, 72])


def test_uneven_channels_by_hand():
    """fc 6 -> 12 -> 9 -> 5, batch 6, two cubes of 1e6 MAC/s, 100 B/s links: plan (batch, in,
    in). Intra: f1's dW 72, f2's and f3's partial outputs 54 and 30. f1 -> f2 (rows to
    columns): 1/4 (72 + 72) = 36. f2 -> f3 (both Type-II): F is whole after f2's all-reduce;
    f3's members read 5 and 4 of the 9 channels and leave those columns of E, so the member
    reading 4 receives the other 5 columns whole f2 needs: 5 x 6 = 30 (the authors' 1/2 A(E)
    assumes even halves: 27). 222 elements. Computation: f1 half of 1296 MACs, f2 half of
    1944, f3 5/9 of 810: 2070 us."""
    cost = plan_cost(_fcs(12, 9, 5), 6, [("batch",), ("in",), ("in",)], Hierarchy((2,)),
                     SLOW_LINK)
    assert cost.communication_s == pytest.approx((222 * 0.04,))
    assert cost.computation_s == pytest.approx((2070e-6,))


def test_two_branch_costs_by_hand():
    """`_branches`, batch 8, two cubes of 1e6 MAC/s, 100 B/s links (0.04 s an element).

    a out, b1 in, b2 out, s batch, o batch. Intra: b1's partial output (8 x 4) all-reduced,
    32; o's dW (4 x 2), 8; a's input error (8 x 6, the graph input's: the authors charge the
    first layer's), 48. Edges: a -> b1 and a -> b2 keep a's channel halves (0); b1 -> s: F
    whole, s's row halves of E gathered back to whole, 16; b2 -> s: channel halves to row
    halves, 1/4 (F + E) = 16. 120 elements.
    All batch: the three dW, 24 + 16 + 8 = 48. All in: partial outputs of a, b1 and o (32,
    32, 16); a's whole E from channel halves for b1 and b2 (16 + 16), b1's for s (16): 128.
    Every plan computes half of 3 x 8 x (24 + 16 + 8) MACs: 576 us."""
    graph, hierarchy = _branches(), Hierarchy((2,))
    for plan, elements in ((("out", "in", "out", "batch", "batch"), 120), (("batch",) * 5, 48),
                           (("in",) * 5, 128)):
        cost = plan_cost(graph, 8, [(kind,) for kind in plan], hierarchy, SLOW_LINK)
        assert cost.communication_s == pytest.approx((elements * 0.04,)), plan
        assert cost.computation_s == pytest.approx((576e-6,))


@pytest.mark.parametrize("k, batch", [(2, 8), (3, 6)])
@pytest.mark.parametrize("name", ["chain", "branches"])
def test_one_level_is_exact(name, k, batch):
    """Against every offered plan on one level, of `small_chain` (3 layers) and of the
    two-branch graph (the skip of b2 around b1 makes it a graph): the search finds the least
    AccPar cost."""
    graph, hierarchy = _graph(*small_chain()) if name == "chain" else _branches(), \
        Hierarchy((k,))
    costs = {plan: plan_cost(graph, batch, plan, hierarchy, DEFAULT).seconds
             for plan in itertools.product(*_options(graph, batch, hierarchy))}
    found = plan_levels(graph, batch, hierarchy, ALL, DEFAULT)
    assert found.seconds == pytest.approx(min(costs.values()), rel=1e-12)
    assert costs[found.columns] == pytest.approx(found.seconds, rel=1e-12)


def test_two_levels_brute_force():
    """All 729 two-level plans of `small_chain` (batch 6, 2 x 2 cubes, all offered): the
    hierarchical search's plan is the cheapest by AccPar's cost (sum over levels of one group's
    communication and computation), and its lower level is the best under its upper one."""
    graph, batch, hierarchy = _graph(*small_chain()), 6, Hierarchy((2, 2))
    options = _options(graph, batch, hierarchy)
    assert [len(o) for o in options] == [9, 9, 9]
    costs = {plan: plan_cost(graph, batch, plan, hierarchy, DEFAULT).seconds
             for plan in itertools.product(*options)}
    found = plan_levels(graph, batch, hierarchy, ALL, DEFAULT)
    assert found.columns == min(costs, key=costs.__getitem__)
    assert found.seconds == pytest.approx(min(costs.values()), rel=1e-12)
    top = tuple(column[0] for column in found.columns)
    under = {plan: costs[plan] for plan in costs if tuple(c[0] for c in plan) == top}
    assert min(under, key=under.__getitem__) == found.columns


def test_lower_level_is_best_under_the_top():
    """Two levels of the two-branch graph: the lower level is the cheapest of every lower plan
    under the top the search chose (the top first, as AccPar's h_partition)."""
    graph, batch, hierarchy = _branches(), 8, Hierarchy((2, 2))
    found = plan_levels(graph, batch, hierarchy, ALL, DEFAULT)
    costs = {plan: plan_cost(graph, batch, plan, hierarchy, DEFAULT).seconds
             for plan in itertools.product(*_options(graph, batch, hierarchy, found.columns))}
    assert found.seconds == pytest.approx(min(costs.values()), rel=1e-12)


def test_level_by_level_is_greedy():
    """Like HyPar's Algorithm 2 (and the authors' `h_partition`), the top level is chosen
    first: here conv c0 takes in there (cheaper at the top), which leaves 16 -> 8 channels
    for the lower level to split; batch at the top would cost more there but less in all."""
    c0 = make_conv("c0", FeatureShape(16, 8, 8), 2, 3, padding=1)
    c1 = make_conv("c1", c0.output, 32, 3, padding=1, pool=Pool(2, 2))
    graph, hierarchy = _graph(c0, c1, make_fc("f", c1.output, 4)), Hierarchy((2, 2))
    found = plan_levels(graph, 4, hierarchy, ALL, DEFAULT)
    assert found.columns == (("in", "batch"), ("out", "out"), ("in", "in"))
    better = (("batch", "in"), ("out", "out"), ("in", "in"))
    other = plan_cost(graph, 4, better, hierarchy, DEFAULT)
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
    graph, hierarchy = _graph(conv, make_fc("fc", conv.output, 4)), Hierarchy((2,))
    options = PlanOptions(kinds=("batch", "in"))
    hypar = make_plan(graph, "hypar", hierarchy, 7, options=options)
    ours = make_plan(graph, "accpar", hierarchy, 7, options=options)
    assert hypar.columns == (("batch",), ("in",)) and ours.columns == (("in",), ("in",))
    assert hypar.traffic_bytes < ours.traffic_bytes
    theirs = plan_cost(graph, 7, hypar.columns, hierarchy, DEFAULT)
    mine = plan_cost(graph, 7, ours.columns, hierarchy, DEFAULT)
    assert theirs.communication_s == pytest.approx((780 * 4 / 0.2e9,))
    assert mine.communication_s == pytest.approx((784 * 4 / 0.2e9,))
    assert theirs.computation_s == pytest.approx(((3_456_000 + 3024) / DEFAULT.macs_per_s,))
    assert mine.computation_s == pytest.approx(((3_024_000 + 3024) / DEFAULT.macs_per_s,))
    no_compute = Hardware(1e30, DEFAULT.link_bytes_per_s)
    assert plan_levels(graph, 7, hierarchy, ("batch", "in"), no_compute).columns == \
        hypar.columns


def test_three_way_level():
    """A (3, 2) hierarchy: fc 6 -> 4 by batch on both levels, batch 12: the top's three groups
    all-reduce dW with 2 x 2/3 x 24 = 32 elements each, the pairs below 24; each level
    computes the heaviest share on its sub-group (4 of 12 samples on 2 cubes, then 2 on 1)."""
    cost = plan_cost(_fcs(4), 12, [("batch", "batch")], Hierarchy((3, 2)), SLOW_LINK)
    assert cost.communication_s == pytest.approx((32 * 0.04, 24 * 0.04))
    macs = 3 * 6 * 4
    assert cost.computation_s == pytest.approx((4 * macs / 2e6, 2 * macs / 1e6))
    plan = hypar_sim.plan("lenet_c", "accpar", hierarchy=(3, 2), batch=96, kinds=ALL)
    assert plan.hierarchy.sizes == (3, 2) and all(len(c) == 2 for c in plan.columns)
    assert plan.traffic_bytes > 0


def test_differs_from_hypar_where_a_partial_output_has_three_readers():
    """fc a (8 -> 8) read by three fc layers (8 -> 64) summed by an add; batch 4, two cubes,
    kinds batch, in, out. Both make the three readers Type-III. AccPar makes a Type-II: it
    all-reduces a's partial output once, 2 x 1/2 x (4 x 8) = 32 elements a member, where a
    Type-III a leaves its output in channel halves and each reader gathers the other half,
    3 x 16 = 48 (the readers' partial errors are all-reduced by the readers under either
    type: their Type-III step). The layout model reduces a partial output once for the
    three readers (they read it alike) and has their partial errors, added where they are,
    all-reduced into the whole error an in-split a needs: 512 bytes against 256 for an
    out-split a; hypar keeps a Type-III, which moves half the bytes of AccPar's plan (and
    AccPar charges its Type-III a the input's error too, 4 x 8 = 32, as the authors do)."""
    graph = parse_graph({"inputs": {"x": [8]}, "nodes": [
        {"name": "a", "type": "fc", "out_features": 8},
        *({"name": f"b{i}", "type": "fc", "out_features": 64, "inputs": ["a"]}
          for i in (1, 2, 3)),
        {"name": "s", "type": "add", "inputs": ["b1", "b2", "b3"]}]}, "three")
    hierarchy = Hierarchy((2,))
    hypar = make_plan(graph, "hypar", hierarchy, 4, options=PlanOptions(kinds=ALL))
    mine = make_plan(graph, "accpar", hierarchy, 4, options=PlanOptions(kinds=ALL))
    assert hypar.columns[:4] == (("out",),) * 4
    assert mine.columns[:4] == (("in",),) + (("out",),) * 3
    per_element = 4 / DEFAULT.link_bytes_per_s
    theirs = plan_cost(graph, 4, hypar.columns, hierarchy, DEFAULT)
    ours = plan_cost(graph, 4, mine.columns, hierarchy, DEFAULT)
    assert theirs.seconds - ours.seconds == pytest.approx((48 + 32 - 32) * per_element)
    sites, costs = graph_sites(graph), layout_costs.Costs(4, 4)
    assert costs.edge(sites[0], sites[1], 0, ("in",), ("out",), hierarchy) == 512
    assert costs.edge(sites[0], sites[1], 0, ("out",), ("out",), hierarchy) == 256
    assert (hypar.traffic_bytes, mine.traffic_bytes) == (256, 512)


def test_kinds_and_offered_are_honoured():
    graph, lenet = _branches(), graph_of(load_network("lenet_c"))
    only = make_plan(graph, "accpar", Hierarchy((2,)), 8, options=PlanOptions(
        kinds=("batch", "spatial")))
    assert set(only.columns) == {("batch",)}
    default = make_plan(lenet, "accpar", Hierarchy((2,)), 64)  # AccPar's own three
    assert default.columns == make_plan(lenet, "accpar", Hierarchy((2,)), 64,
                                        options=PlanOptions(kinds=ALL)).columns
    with pytest.raises(InputError, match="--kinds: accpar searches batch, in and out"):
        make_plan(graph, "accpar", Hierarchy((2,)), 8,
                  options=PlanOptions(kinds=("spatial",)))
    with pytest.raises(InputError, match="accpar cannot split node a"):
        make_plan(graph, "accpar", Hierarchy((2,)), 1, options=PlanOptions(
            kinds=("batch",)))
    with pytest.raises(InputError, match=r"accpar cannot split node conv1 \(conv\)"):
        make_plan(lenet, "accpar", Hierarchy((2,)), 64, options=PlanOptions(
            kinds=("in",)))
    with pytest.raises(InputError, match="accpar cannot cost kind"):
        plan_cost(graph, 8, [("spatial",)] * 5, Hierarchy((2,)), DEFAULT)


def test_plan_runs_under_the_simulator():
    """A plan of a shipped chain runs, moving the bytes it plans."""
    plan = hypar_sim.plan("lenet_c", "accpar", accelerators=2, batch=64)
    result = hypar_sim.simulate("lenet_c", "accpar", accelerators=2, batch=64,
                                engine="analytic")
    assert result.latency_s > 0 and plan.traffic_bytes > 0
    assert result.traffic_bytes == pytest.approx(plan.traffic_bytes, rel=1e-12)
