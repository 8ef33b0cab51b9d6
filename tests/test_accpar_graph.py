"""AccPar on graph networks (hypar_sim.planner.accpar_graph): its tables recovered, costs by
hand, brute force on a two-branch graph, shipped graphs planned and simulated, and where its
plan differs from hypar's."""

from __future__ import annotations

import itertools

import pytest

import hypar_sim.planner.accpar_graph as ag  # registers the graph strategy
from hypar_sim.errors import InputError
from hypar_sim.hardware.config import load_hardware
from hypar_sim.partition import graph_layout
from hypar_sim.partition.graph_axes import sites as graph_sites
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.planner import accpar
from hypar_sim.planner.graph_plan import make_graph_plan
from hypar_sim.planner.strategies import STRATEGIES, PlanOptions
from hypar_sim.workload.graph import parse_graph
from hypar_sim.workload.layers import FeatureShape, make_fc

ALL = ("batch", "in", "out")
DEFAULT = accpar.Hardware.from_config(load_hardware())
SLOW_LINK = accpar.Hardware(1e6, 100.0)  # 4-byte words: 0.04 s an element


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


def _options(graph, batch, hierarchy, fixed_top=None):
    """Every node's offered columns (under `fixed_top`'s upper kinds, if given)."""
    result = []
    for i, site in enumerate(graph_sites(graph)):
        tops = [fixed_top[i][:1]] if fixed_top else [(k,) for k in ALL]
        result.append([top + rest for top in tops
                       for rest in itertools.product(ALL, repeat=hierarchy.levels - len(top))
                       if graph_layout.offered(site, batch, top + rest, hierarchy)])
    return result


def test_registered():
    assert STRATEGIES["accpar"].graph is ag.accpar_graph_columns


@pytest.mark.parametrize("k", [2, 3])
def test_edges_recover_the_authors_tables(k):
    """fc -> fc (36 x 36 features, batch 36): the edge fraction times |F| is `accpar`'s
    inter-layer table for all nine type pairs, and each type's intra-layer elements are its
    intra table (Type-I dW, Type-II F_{l+1}, Type-III E_l)."""
    graph = _fcs(36, 5, inputs=36)
    model = ag._Model(graph, graph_sites(graph), 36, DEFAULT, 4)
    second = accpar.group_tensors(make_fc("f2", FeatureShape(36, 1, 1), 5), 36, (), ())
    for before, kind in itertools.product(ALL, ALL):
        assert model.edge_fraction(0, 1, 0, before, kind, k) * 36 * 36 == pytest.approx(
            accpar.inter_elements(before, kind, second, k)), (before, kind)
    whole = ag.node_shares(graph_sites(graph)[1], 36, (), Hierarchy(()))
    for kind in ALL:
        assert model.intra_elements(1, kind, k, whole) == pytest.approx(
            accpar.intra_elements(kind, second, k))


@pytest.mark.parametrize("k", [2, 3])
def test_a_chain_graph_costs_what_the_chain_model_says(k):
    """Every one-level plan of a 3-fc chain costs the same as a graph and as a chain (a
    Type-III first layer charged the all-reduce of the input's error, 2 (k-1)/k x 6 x 6
    elements, as the authors' chain code charges it). The
    tensors between layers divide by k: where they do not, the graph form charges the
    heaviest member's receipt on its real share (f2 -> f3 both Type-II with 9 channels on
    two cubes: the member reading 4 of them receives 5 of the 9 error columns, not 4.5)."""
    graph, batch, hierarchy = _fcs(12, 6, 5), 6, Hierarchy((k,))
    layers = [make_fc("f1", FeatureShape(6, 1, 1), 12)]
    layers += [make_fc("f2", layers[0].output, 6), make_fc("f3", FeatureShape(6, 1, 1), 5)]
    for plan in itertools.product([(kind,) for kind in ALL], repeat=3):
        if not all(graph_layout.offered(s, batch, c, hierarchy)
                   for s, c in zip(graph_sites(graph), plan, strict=True)):
            continue
        chain = accpar.plan_cost(layers, batch, plan, hierarchy, DEFAULT).seconds
        mine = ag.plan_cost(graph, batch, plan, hierarchy, DEFAULT).seconds
        assert mine == pytest.approx(chain, rel=1e-12), plan
    if k == 2:
        uneven = [make_fc("f2", layers[0].output, 9), make_fc("f3", FeatureShape(9, 1, 1), 5)]
        plan = [("batch",), ("in",), ("in",)]
        chain = accpar.plan_cost([layers[0], *uneven], batch, plan, hierarchy, DEFAULT)
        mine = ag.plan_cost(_fcs(12, 9, 5), batch, plan, hierarchy, DEFAULT)
        assert mine.seconds - chain.seconds == pytest.approx(
            (30 - 27) * 4 / DEFAULT.link_bytes_per_s)


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
        cost = ag.plan_cost(graph, 8, [(kind,) for kind in plan], hierarchy, SLOW_LINK)
        assert cost.communication_s == pytest.approx((elements * 0.04,)), plan
        assert cost.computation_s == pytest.approx((576e-6,))


@pytest.mark.parametrize("k, batch", [(2, 8), (3, 6)])
def test_one_level_is_exact_over_the_graph(k, batch):
    """Against every plan of the two-branch graph on one level: the min-sum over the graph
    finds the least AccPar cost (the skip of b2 around b1 makes it a graph, not a chain)."""
    graph, hierarchy = _branches(), Hierarchy((k,))
    costs = {plan: ag.plan_cost(graph, batch, plan, hierarchy, DEFAULT).seconds
             for plan in itertools.product(*_options(graph, batch, hierarchy))}
    found = ag.plan_levels(graph, batch, hierarchy, ALL, DEFAULT)
    assert found.seconds == pytest.approx(min(costs.values()), rel=1e-12)
    assert costs[found.columns] == pytest.approx(found.seconds, rel=1e-12)


def test_lower_level_is_best_under_the_top():
    """Two levels: the lower level is the cheapest of every lower plan under the top the
    search chose (the top first, as AccPar's h_partition)."""
    graph, batch, hierarchy = _branches(), 8, Hierarchy((2, 2))
    found = ag.plan_levels(graph, batch, hierarchy, ALL, DEFAULT)
    costs = {plan: ag.plan_cost(graph, batch, plan, hierarchy, DEFAULT).seconds
             for plan in itertools.product(*_options(graph, batch, hierarchy, found.columns))}
    assert found.seconds == pytest.approx(min(costs.values()), rel=1e-12)


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
    hypar = make_graph_plan(graph, "hypar", hierarchy, 4, options=PlanOptions(kinds=ALL))
    mine = make_graph_plan(graph, "accpar", hierarchy, 4, options=PlanOptions(kinds=ALL))
    assert hypar.columns[:4] == (("out",),) * 4
    assert mine.columns[:4] == (("in",),) + (("out",),) * 3
    per_element = 4 / DEFAULT.link_bytes_per_s
    theirs = ag.plan_cost(graph, 4, hypar.columns, hierarchy, DEFAULT)
    ours = ag.plan_cost(graph, 4, mine.columns, hierarchy, DEFAULT)
    assert theirs.seconds - ours.seconds == pytest.approx((48 + 32 - 32) * per_element)
    sites, costs = graph_sites(graph), graph_layout.Costs(4, 4)
    assert costs.edge(sites[0], sites[1], 0, ("in",), ("out",), hierarchy) == 512
    assert costs.edge(sites[0], sites[1], 0, ("out",), ("out",), hierarchy) == 256
    assert (hypar.traffic_bytes, mine.traffic_bytes) == (256, 512)


def test_kinds_are_honoured():
    graph = _branches()
    only = make_graph_plan(graph, "accpar", Hierarchy((2,)), 8, options=PlanOptions(
        kinds=("batch", "spatial")))
    assert set(only.columns) == {("batch",)}
    with pytest.raises(InputError, match="--kinds: accpar searches batch, in and out"):
        make_graph_plan(graph, "accpar", Hierarchy((2,)), 8,
                        options=PlanOptions(kinds=("spatial",)))
    with pytest.raises(InputError, match="accpar cannot split node a"):
        make_graph_plan(graph, "accpar", Hierarchy((2,)), 1, options=PlanOptions(
            kinds=("batch",)))
    with pytest.raises(InputError, match="accpar cannot cost kind"):
        ag.plan_cost(graph, 8, [("spatial",)] * 5, Hierarchy((2,)), DEFAULT)
