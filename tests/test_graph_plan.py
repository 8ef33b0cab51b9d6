"""Planning graph networks: exact against every plan on small graphs, the skip edge of a
residual block matters, a chain graph costs what the chain model says, CNN graphs plan on
16 and 64 accelerators."""

from __future__ import annotations

import itertools
import json
from functools import partial

import numpy as np
import pytest

from hypar_sim.errors import InputError
from hypar_sim.partition import layout_costs, node_layout
from hypar_sim.partition.axes import sites as graph_sites
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.planner.options import PlanOptions
from hypar_sim.planner.plan import evaluate_plan, make_plan, plan_graph
from hypar_sim.planner.plan_messages import shared_cost, shared_table, sharing_edges
from hypar_sim.planner.traffic import TRAFFIC_MODELS
from hypar_sim.workload.graph import parse_graph
from hypar_sim.workload.layers import FeatureShape, make_conv, make_fc
from hypar_sim.workload.network import load_workload
from tests.conftest import run_cli


def residual(channels=8, size=2, kernel=1, out=10):
    """A stem convolution, two convolutions and the add that joins the stem's output back
    in (the skip edge), then a classifier."""
    return parse_graph({"inputs": {"x": [3, size, size]}, "nodes": [
        {"name": "c0", "type": "conv", "out_channels": channels, "kernel": 3, "padding": 1},
        {"name": "c1", "type": "conv", "out_channels": channels, "kernel": kernel,
         "padding": kernel // 2},
        {"name": "c2", "type": "conv", "out_channels": channels, "kernel": kernel,
         "padding": kernel // 2},
        {"name": "sum", "type": "add", "inputs": ["c2", "c0"]},
        {"name": "fc", "type": "fc", "out_features": out}]}, "residual")


def inception():
    """A stem, four branches (1x1; 1x1 then 3x3; 1x1 then 5x5; pool then 1x1) and their
    concatenation, then a classifier."""
    conv = {"type": "conv", "kernel": 1}
    return parse_graph({"inputs": {"x": [3, 4, 4]}, "nodes": [
        {"name": "stem", "type": "conv", "out_channels": 8, "kernel": 3, "padding": 1},
        {"name": "b1", **conv, "out_channels": 4, "inputs": ["stem"]},
        {"name": "b2r", **conv, "out_channels": 4, "inputs": ["stem"]},
        {"name": "b2", "type": "conv", "out_channels": 8, "kernel": 3, "padding": 1},
        {"name": "b3r", **conv, "out_channels": 2, "inputs": ["stem"]},
        {"name": "b3", "type": "conv", "out_channels": 4, "kernel": 5, "padding": 2},
        {"name": "pool", "type": "pool", "kernel": 3, "stride": 1, "padding": 1,
         "inputs": ["stem"]},
        {"name": "proj", **conv, "out_channels": 4},
        {"name": "cat", "type": "concat", "inputs": ["b1", "b2", "b3", "proj"]},
        {"name": "fc", "type": "fc", "out_features": 10}]}, "inception")


def every_plan_total(graph, batch, hierarchy, kinds, skip=None):
    """The least total over every plan, by summing every cost table over the full grid of
    options (numpy broadcasting), and that plan; `skip` (consumer, input) leaves one edge
    out."""
    sites = graph_sites(graph)
    options = [[c for c in itertools.product(kinds, repeat=hierarchy.levels)
                if node_layout.offered(s, batch, c, hierarchy)] for s in sites]
    costs = layout_costs.Costs(batch, 4)
    count = len(options)
    grid = np.zeros([len(o) for o in options])

    def spread(table, axes):
        shape = [1] * count
        for axis, size in zip(axes, table.shape, strict=True):
            shape[axis] = size
        return table.reshape(shape)
    for i, site in enumerate(sites):
        own = np.array([costs.own(site, c, hierarchy, site.node.name in graph.outputs)
                        for c in options[i]])
        grid = grid + spread(own, [i])
    for edges in sharing_edges(graph):  # consumers that read alike pay once
        edges = [(p, c, k) for p, c, k in edges if skip != (graph.nodes[c].name, k)]
        if not edges:
            continue
        nodes, table = shared_table(costs, sites, edges, options, hierarchy)
        grid = grid + spread(np.array(table).reshape([len(options[n]) for n in nodes]),
                             list(nodes))
    best = np.unravel_index(int(np.argmin(grid)), grid.shape)
    return float(grid[best]), [options[i][j] for i, j in enumerate(best)]


@pytest.mark.parametrize("kinds", [("batch", "in"), ("batch", "in", "out", "spatial")])
def test_residual_block_joint_search_is_exact(kinds):
    graph, hierarchy = residual(), Hierarchy.binary(2)
    plan = plan_graph(graph, "hypar", hierarchy, 4, kinds, "joint")
    best, _ = every_plan_total(graph, 4, hierarchy, kinds)
    assert plan.traffic_bytes == pytest.approx(best, rel=1e-12)
    again = evaluate_plan(graph, "hypar", "joint", 4, hierarchy, plan.columns)
    assert again.traffic_bytes == plan.traffic_bytes
    assert sum(plan.traffic_bytes_per_level) == pytest.approx(plan.traffic_bytes, rel=1e-12)


def test_optimal_is_the_brute_force_minimum_over_every_split_kind():
    """`optimal` on a graph searches every kind but replicate (unless named) over all
    levels at once: the brute-force least total, never above hypar's or a fixed plan's."""
    graph, hierarchy = residual(), Hierarchy.binary(2)
    plan = make_plan(graph, "optimal", hierarchy, 4)
    kinds = ("batch", "in", "out", "spatial")  # the block has no heads, nor groups
    best, _ = every_plan_total(graph, 4, hierarchy, kinds)
    assert plan.traffic_bytes == pytest.approx(best, rel=1e-12)
    assert "replicate" not in {k for column in plan.columns for k in column}
    for other in ("hypar", "data", "model", "trick", "tofu", "accpar", "grid"):
        assert plan.traffic_bytes <= make_plan(graph, other, hierarchy, 4).traffic_bytes
    named = make_plan(graph, "optimal", Hierarchy((2,)), 4,
                      options=PlanOptions(kinds=(*kinds, "replicate")))
    assert named.traffic_bytes == 0  # every node computed whole everywhere: nothing moves


@pytest.mark.parametrize("kinds", [("batch", "in"), ("batch", "in", "out")])
def test_exhaustive_tries_every_plan_and_finds_the_brute_force_minimum(kinds):
    graph, hierarchy = residual(), Hierarchy.binary(2)
    plan = make_plan(graph, "exhaustive", hierarchy, 4, options=PlanOptions(kinds=kinds))
    best, columns = every_plan_total(graph, 4, hierarchy, kinds)
    assert plan.traffic_bytes == pytest.approx(best, rel=1e-12)
    assert list(plan.columns) == columns  # ties: the first in enumeration order, as numpy's
    with pytest.raises(InputError, match=r"^--strategy exhaustive: about 10\^20 plans of resnet18 "
                       r"to try, more than 4,194,304; .* or optimal"):
        make_plan(load_workload("resnet18"), "exhaustive", Hierarchy((2,)), 4)


def test_an_exact_search_too_large_is_refused_in_one_line():
    """The kinds named are those the graph's nodes offer (no heads in a CNN); hypar's joint
    search is told to search level by level, optimal to use hypar."""
    graph = load_workload("resnet50")
    with pytest.raises(InputError, match=r"^--strategy optimal: the exact search on resnet50 "
                       r"costs [\d,]+ pairs of columns \(up to \d+ columns of kinds "
                       r"batch,in,out,spatial per node over 4 levels\), more than 131,072; use "
                       r"fewer --kinds, fewer levels \(--accelerators\) or hypar"):
        make_plan(graph, "optimal", Hierarchy.binary(4), 16)
    with pytest.raises(InputError, match=r"^--strategy hypar --search joint: .* or --search "
                       r"greedy \(level by level\)$"):
        make_plan(graph, "hypar", Hierarchy.binary(4), 16,
                  options=PlanOptions(("batch", "in", "out"), search="joint"))


def test_a_batch_too_small_for_the_array_says_which_batch_would_do():
    with pytest.raises(InputError, match=r"no kind of batch can split node conv1 .* on the "
                       r"top 2 level\(s\) \(2x2\) of the array; .* with batch 2, fewer samples "
                       r"than the 4 groups of these levels: use a batch of at least 4"):
        make_plan(load_workload("resnet18"), "data", Hierarchy((2, 2, 2)), 2)


def test_the_skip_edge_changes_the_optimum():
    """Leaving the add's skip input out of the costs picks another plan, which costs more
    once the skip edge is counted."""
    graph, hierarchy = residual(), Hierarchy.binary(2)
    with_skip, plan = every_plan_total(graph, 4, hierarchy, ("batch", "in"))
    _, blind = every_plan_total(graph, 4, hierarchy, ("batch", "in"), skip=("sum", 1))
    assert plan != blind
    cost_of_blind = evaluate_plan(graph, "x", "", 4, hierarchy, blind).traffic_bytes
    assert cost_of_blind > with_skip
    assert plan_graph(graph, "hypar", hierarchy, 4, ("batch", "in"), "joint").traffic_bytes \
        == pytest.approx(with_skip, rel=1e-12)


def test_inception_block_four_branches_at_two_levels_is_exact():
    graph, hierarchy = inception(), Hierarchy.binary(2)
    plan = plan_graph(graph, "hypar", hierarchy, 8, ("batch", "in"), "joint")
    best, _ = every_plan_total(graph, 8, hierarchy, ("batch", "in"))
    assert plan.traffic_bytes == pytest.approx(best, rel=1e-12)
    greedy = plan_graph(graph, "hypar", hierarchy, 8, ("batch", "in"), "greedy")
    assert greedy.traffic_bytes >= plan.traffic_bytes * (1 - 1e-12)


@pytest.mark.slow  # a default run on 2 cores stays under 5 minutes
def test_a_chain_graph_costs_what_the_chain_model_says():
    """conv -> conv -> fc as a graph and as a chain network: the same bytes for every plan
    (the same rule on the same boxes)."""
    first = make_conv("c1", FeatureShape(3, 6, 6), 8, 3, padding=1)
    second = make_conv("c2", first.output, 6, 3, stride=2, padding=1)
    last = make_fc("fc", second.output, 5)
    graph = parse_graph({"inputs": {"x": [3, 6, 6]}, "nodes": [
        {"name": "c1", "type": "conv", "out_channels": 8, "kernel": 3, "padding": 1},
        {"name": "c2", "type": "conv", "out_channels": 6, "kernel": 3, "stride": 2,
         "padding": 1},
        {"name": "fc", "type": "fc", "out_features": 5}]}, "chain")
    model, hierarchy, batch = TRAFFIC_MODELS["layout"], Hierarchy((2, 3)), 6
    kinds = ("batch", "in", "out", "spatial")
    options = [[c for c in itertools.product(kinds, repeat=2)
                if model.offered(layer, batch, c, hierarchy)] for layer in (first, second, last)]
    for columns in itertools.islice(itertools.product(*options), 0, None, 7):
        chain = sum(float(model.own_costs(layer, batch, [c], hierarchy, 4, i == 2)[0])
                    for i, (layer, c) in enumerate(zip((first, second, last), columns,
                                                       strict=True)))
        chain += sum(float(model.boundary_costs(a, b, batch, [ca], [cb], hierarchy, 4)[0, 0])
                     for a, b, ca, cb in ((first, second, columns[0], columns[1]),
                                          (second, last, columns[1], columns[2])))
        graphed = evaluate_plan(graph, "x", "", batch, hierarchy, columns)
        assert graphed.traffic_bytes == pytest.approx(chain, rel=1e-12), columns


@pytest.mark.parametrize("name", ["resnet18", "resnet50",
                                  pytest.param("inception_v1", marks=pytest.mark.slow),
                                  "mobilenet_v2"])
@pytest.mark.parametrize("accelerators", [16, pytest.param(64, marks=pytest.mark.slow)])
def test_cnn_graphs_plan_on_16_and_64_accelerators(name, accelerators):
    graph = load_workload(name)
    hierarchy = Hierarchy.for_count(accelerators)
    data = plan_graph(graph, "data", hierarchy, 256)
    hypar = plan_graph(graph, "hypar", hierarchy, 256)
    # data parallelism moves exactly the all-reduce of every parameter: 2 (M - 1) copies
    assert data.traffic_bytes == pytest.approx(2 * (accelerators - 1) * graph.params * 4,
                                               rel=1e-9)
    assert hypar.traffic_bytes <= data.traffic_bytes
    assert sum(hypar.traffic_bytes_per_level) == pytest.approx(hypar.traffic_bytes, rel=1e-9)


def test_graph_plan_errors_name_the_node_or_flag():
    with pytest.raises(InputError, match=r"strategy: unknown 'soybeans' \(did you mean "
                                          r"'soybean'\?\); allowed: hypar, optimal, "
                                          r"exhaustive, explicit, data, model, trick"):
        plan_graph(residual(), "soybeans", Hierarchy.binary(2), 8)
    with pytest.raises(InputError, match="no kind of spatial can split node"):
        plan_graph(residual(), "hypar", Hierarchy.binary(2), 8, ("spatial",))


def test_cli_plans_a_graph(tmp_path):
    cli = partial(run_cli, cwd=tmp_path)
    done = cli("plan", "resnet18", "--accelerators", "4", "--batch", "32", "--json")
    assert done.returncode == 0, done.stderr
    plan = json.loads(done.stdout)
    assert plan["accelerators"] == 4 and len(plan["nodes"]) == 68
    assert plan["traffic_bytes"] == pytest.approx(sum(n["bytes"] for n in plan["nodes"]))
    text = cli("plan", "inception_v1", "--strategy", "data", "--levels", "2")
    assert text.returncode == 0 and "i3a_concat" in text.stdout and "level 2:" in text.stdout
    for args, fragment in ((("--traffic-model", "paper"), "of conv and fc layers"),
                           (("--plan", "batch"), "has 1 level(s), expected 4 (one row of kinds per level)")):
        bad = cli("plan", "resnet18", *args)
        assert bad.returncode == 2 and fragment in bad.stderr and not list(tmp_path.iterdir())


def mlp_graph(tokens=1):
    """A transformer's MLP on a token stream: 4096 -> 16384 -> 4096 features."""
    return parse_graph({"inputs": {"x": [tokens, 4096]}, "nodes": [
        {"name": "fc1", "type": "fc", "out_features": 16384},
        {"name": "fc2", "type": "fc", "out_features": 4096}]}, "mlp")


def test_token_mlp_splits_out_then_in_as_the_chain_does():
    """The chain test's two fc layers as a token graph (one token, batch 8, 2 accelerators):
    out then in, nothing between them; 262,144 bytes (the second layer's partial outputs
    reduce-scattered forward and its error gathered backward)."""
    plan = plan_graph(mlp_graph(), "hypar", Hierarchy.binary(1), 8, ("batch", "in", "out"))
    assert plan.columns == (("out",), ("in",)) and plan.traffic_bytes == 262_144


def attention(tokens=4, dim=8, heads=2):
    """One attention block: Q, K, V projections, heads, scores, softmax, context, the output
    projection (the shipped BERT's layout of it, small)."""
    nodes = []
    for t in ("q", "k", "v"):
        nodes += [{"name": t, "type": "fc", "out_features": dim, "inputs": ["x"]},
                  {"name": f"{t}h", "type": "reshape", "shape": [-1, heads, dim // heads]},
                  {"name": f"{t}t", "type": "transpose", "perm": [1, 0, 2]}]
    nodes += [{"name": "s", "type": "matmul", "inputs": ["qt", "kt"], "transpose_b": True},
              {"name": "p", "type": "softmax"},
              {"name": "c", "type": "matmul", "inputs": ["p", "vt"]},
              {"name": "ct", "type": "transpose", "perm": [1, 0, 2]},
              {"name": "cm", "type": "reshape", "shape": [-1, dim]},
              {"name": "o", "type": "fc", "out_features": dim}]
    return parse_graph({"inputs": {"x": [tokens, dim]}, "nodes": nodes}, "attention")


def test_attention_axes_are_named_through_reshape_transpose_and_products():
    named = {s.node.name: "".join(s.output) for s in graph_sites(attention())}
    assert named["q"] == "PK" and named["qh"] == "PHK" and named["qt"] == "HPK"
    assert named["s"] == "HPK" and named["c"] == "HPK" and named["cm"] == "PK"


def test_attention_block_search_is_exact():
    graph, hierarchy = attention(), Hierarchy.binary(1)
    kinds = ("batch", "in", "heads")
    plan = plan_graph(graph, "hypar", hierarchy, 2, kinds, "joint")
    best, _ = every_plan_total(graph, 2, hierarchy, kinds)
    assert plan.traffic_bytes == pytest.approx(best, rel=1e-12)
    # Megatron-LM's split: projections by output features (= by head), heads through the
    # attention, the output projection by input features: only the loss's partial sums move
    megatron = [("out",), ("heads",), ("heads",)] * 3 + [("heads",)] * 4 + [("out",), ("in",)]
    split = evaluate_plan(graph, "x", "", 2, hierarchy, megatron)
    assert split.traffic_bytes == 2 * (2 * 4 * 8) * 4  # reduce and gather of batch x 4 x 8
    best_three = plan_graph(graph, "hypar", hierarchy, 2, ("batch", "in", "out", "heads"),
                            "joint")
    assert best_three.traffic_bytes <= split.traffic_bytes


@pytest.mark.parametrize("name, accelerators", [("bert_base", 8), ("gpt2_small", 16)])
def test_transformers_plan_and_data_parallelism_moves_every_parameter(name, accelerators):
    graph = load_workload(name)
    hierarchy = Hierarchy.for_count(accelerators)
    data = plan_graph(graph, "data", hierarchy, 32)
    assert data.traffic_bytes == pytest.approx(2 * (accelerators - 1) * graph.params * 4,
                                               rel=1e-9)
    three = plan_graph(graph, "hypar", hierarchy, 32, ("batch", "in", "out"))
    assert three.traffic_bytes < data.traffic_bytes


def test_a_grouped_convolution_is_split_by_whole_groups():
    """groups=4, 8 -> 8 channels on 2 members by `groups`: member 0 makes channels 0-3 from
    inputs 0-3, member 1 the rest; after a stem and a batch norm split by channels nothing
    moves at all (no partial sums, no replicated weights)."""
    graph = parse_graph({"inputs": {"x": [8, 4, 4]}, "nodes": [
        {"name": "stem", "type": "conv", "out_channels": 8, "kernel": 1},
        {"name": "bn", "type": "batch_norm"},
        {"name": "g", "type": "conv", "out_channels": 8, "kernel": 3, "padding": 1,
         "groups": 4, "bias": True}]}, "grouped")
    sites = graph_sites(graph)
    hierarchy = Hierarchy.binary(1)
    layout = node_layout.layout(sites[2], 2, ("groups",), hierarchy)
    assert layout.outputs()[1] == (((0, 2), (4, 8), (0, 4), (0, 4)),)
    assert layout.reads(0)[0] == (((0, 2), (0, 4), (0, 4), (0, 4)),)
    plan = evaluate_plan(graph, "x", "", 2, hierarchy, [("out",), ("out",), ("groups",)])
    assert plan.traffic_bytes == 0
    by_out = evaluate_plan(graph, "x", "", 2, hierarchy, [("out",), ("out",), ("out",)])
    assert by_out.traffic_bytes > 0  # within-group output channels: every group's inputs
    assert not node_layout.offered(sites[2], 2, ("groups",), Hierarchy((8,)))
    depthwise = load_workload("mobilenet_v2")
    kinds = ("batch", "in", "out", "groups")
    plan = plan_graph(depthwise, "hypar", Hierarchy.binary(2), 8, kinds)
    dw = [c for n, c in zip(plan.node_names, plan.columns, strict=True) if n.endswith("_dw")]
    assert any("groups" in c for c in dw)


def test_sequence_parallelism_is_the_spatial_kind_on_token_streams():
    from hypar_sim.partition.kinds import resolve_kind

    assert resolve_kind("seq") == "spatial"
    plan = plan_graph(mlp_graph(tokens=4), "hypar", Hierarchy.binary(1), 2, ("spatial",))
    assert plan.columns == (("spatial",), ("spatial",))  # each member its tokens
    # nothing moves between the layers; both weight gradients are all-reduced (reduce + gather)
    assert plan.traffic_bytes == 2 * (4096 * 16384 + 16384 * 4096) * 4


@pytest.mark.parametrize("kinds", [("batch", "in", "out"), ("batch", "out", "spatial", "heads")])
def test_shared_tables_equal_the_cell_by_cell_cost(kinds):
    """`shared_table` (each edge's table broadcast over the group's grid) gives, in every
    cell, `shared_cost` of that combination (the consumers that read alike paying once):
    brute force over every combination of the group's options, on a layer norm read by q,
    k and v."""
    graph = parse_graph({"inputs": {"x": [4, 8]}, "nodes": [
        {"name": "ln", "type": "layer_norm"},
        *({"name": t, "type": "fc", "out_features": 8, "inputs": ["ln"]} for t in "qkv"),
        {"name": "sum", "type": "add", "inputs": ["q", "k", "v"]}]}, "shared")
    hierarchy, batch = Hierarchy.binary(2), 4
    sites = graph_sites(graph)
    options = [[c for c in itertools.product(kinds, repeat=hierarchy.levels)
                if node_layout.offered(s, batch, c, hierarchy)] for s in sites]
    costs = layout_costs.Costs(batch, 4)
    shared = [edges for edges in sharing_edges(graph) if len(edges) > 1]
    assert shared
    for edges in shared:
        nodes, table = shared_table(costs, sites, edges, options, hierarchy)
        cells = list(itertools.product(*(options[n] for n in nodes)))
        assert len(table) == len(cells)
        for combo, value in zip(cells, table, strict=True):
            columns = [()] * len(sites)
            for n, column in zip(nodes, combo, strict=True):
                columns[n] = column
            assert value == pytest.approx(shared_cost(costs, sites, edges, columns, hierarchy),
                                          rel=1e-12, abs=1e-9)


def test_steps_held_alike_share_their_costs_and_equal_fresh_ones():
    """`Costs` computes an edge's bytes (in closed form) once per what the edge's two ends
    hold (regions, replicas, the tensor's shape and pooling), a node's own steps once per
    `node_layout.own_key`, and `TimedCosts` times an edge's stages once per the same key,
    whatever the nodes: on every edge under every pair of columns at two levels, and every
    node under every column (as an output and not), each equals its value from matrices
    computed afresh, and fewer are computed than asked for. The graph has two branches
    whose outputs are held alike but one pooled (its partial sums reduced before the
    pooling), a 3x3 and a 1x1 convolution of the same channels (weights alike but for
    their kernel), a `replicate` level (copies held where an `in` level holds partial
    sums, in the same regions), biases and a norm's vectors."""
    from hypar_sim.hardware.config import load_hardware
    from hypar_sim.hardware.topology import make_topology
    from hypar_sim.planner.timed_costs import TimedCosts

    graph = parse_graph({"inputs": {"x": [4, 4, 4]}, "nodes": [
        {"name": "a", "type": "conv", "out_channels": 8, "kernel": 1},
        {"name": "pool", "type": "pool", "kernel": 2, "stride": 2},
        {"name": "b", "type": "conv", "out_channels": 8, "kernel": 1, "stride": 2,
         "inputs": ["x"]},
        {"name": "c", "type": "conv", "out_channels": 8, "kernel": 3, "stride": 2,
         "padding": 1, "inputs": ["x"]},
        {"name": "sum", "type": "add", "inputs": ["pool", "b", "c"]},
        {"name": "fc", "type": "fc", "out_features": 8, "bias": True},
        {"name": "ln", "type": "layer_norm"},
        {"name": "out", "type": "fc", "out_features": 8, "bias": True}]}, "alike")
    hierarchy, batch = Hierarchy.binary(2), 4
    sites = graph_sites(graph)
    kinds = ("batch", "in", "out", "spatial", "replicate")
    options = [[c for c in itertools.product(kinds, repeat=hierarchy.levels)
                if node_layout.offered(s, batch, c, hierarchy)] for s in sites]
    costs = layout_costs.Costs(batch, 4)
    config = load_hardware()
    timed = TimedCosts(batch, 4, False, "time", config,
                       make_topology("htree", config, hierarchy), set())
    edges, index = 0, {node.name: i for i, node in enumerate(graph.nodes)}
    for c, node in enumerate(graph.nodes):
        for k, name in enumerate(node.inputs):
            if name not in index:
                continue  # a graph input
            p = index[name]
            for a, b in itertools.product(options[p], options[c]):
                fresh = node_layout.edge_matrices(
                    node_layout.layout(sites[p], batch, a, hierarchy),
                    node_layout.layout(sites[c], batch, b, hierarchy), k, batch, 4)
                assert costs.edge(sites[p], sites[c], k, a, b, hierarchy) == pytest.approx(
                    sum(m.sum() for m in fresh.values()), rel=1e-12)
                assert timed.edge_stages(sites[p], sites[c], k, a, b, hierarchy) == {
                    stage: timed.matrices_value({stage: m}) for stage, m in fresh.items()}
                edges += 1
    assert len(costs._edge_bytes) < edges
    owns = 0
    for (i, site), is_output in itertools.product(enumerate(sites), (False, True)):
        for column in options[i]:
            fresh = node_layout.own_matrices(node_layout.layout(site, batch, column, hierarchy),
                                             batch, 4, is_output)
            assert {s: m.entries().dense().tolist() for s, m in
                    costs.own_matrices(site, column, hierarchy, is_output).items()} == \
                {s: m.entries().dense().tolist() for s, m in fresh.items()}
            closed = node_layout.own_bytes(node_layout.layout(site, batch, column, hierarchy),
                                           batch, 4, is_output)
            assert closed == pytest.approx({s: m.sum() for s, m in fresh.items()}, rel=1e-12)
            assert costs.own(site, column, hierarchy, is_output) == pytest.approx(
                sum(m.sum() for m in fresh.values()), rel=1e-12)
            owns += 1
    assert len(costs._own_matrices) < owns and len(costs._own_bytes) < owns
