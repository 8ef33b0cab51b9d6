"""Features that were chain-only, on graph networks (issue "One graph", item 4): an
explicit per-node `--plan` that reads back from `plan --json`, `trick`, `--phases
forward`; operators as descriptions (item 1): a new one registered here, broadcasting."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from hypar_sim.errors import InputError
from hypar_sim.hardware.config import load_hardware
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.steps import Phase
from hypar_sim.planner.options import PlanOptions
from hypar_sim.planner.plan import evaluate_plan, make_plan
from hypar_sim.planner.plan_text import parse_node_plan
from hypar_sim.runner import SimOptions, simulate
from hypar_sim.sim.schedule import build_schedule
from hypar_sim.workload.dims import Dim
from hypar_sim.workload.graph import parse_graph
from hypar_sim.workload.network import load_workload
from hypar_sim.workload.ops import OPS, Counts, OpSpec, register_op, unregister_op
from hypar_sim.workload.tdl import Access, Description, Ix, Weights, Whole, Window
from tests.conftest import assert_sent_equals_received_equals
from tests.test_graph_plan import attention, residual

HW = load_hardware()


def test_node_plan_text():
    names = ["a", "b", "c"]
    assert parse_node_plan("*: batch in; b: mp dp", names, 2) == [
        ("batch", "in"), ("in", "batch"), ("batch", "in")]
    assert parse_node_plan("a: out\n# comment\nb: in\nc: batch", names, 1) == [
        ("out",), ("in",), ("batch",)]


@pytest.mark.parametrize(("text", "fragment"), [
    ("a: batch", "no kinds for node(s) b, c; name them or add '*: kinds'"),
    ("*: batch; d: in", "no node named 'd'"),
    ("*: batch batch", "* has 2 kind(s), expected 1"),
    ("*: rows", "unknown split kind 'rows'"),
    ("batch in", "'batch in' is not 'node: kinds'"),
])
def test_bad_node_plans_are_one_line(text, fragment):
    with pytest.raises(InputError, match=re.escape(fragment)):
        parse_node_plan(text, ["a", "b", "c"], 1)


def test_plan_json_reads_back_as_an_explicit_plan(cli, tmp_path):
    """`plan --json` of a graph, given back with --plan, is the same plan and traffic."""
    args = ("resnet18", "--accelerators", "4", "--batch", "16", "--kinds", "batch,in,out")
    first = cli("plan", *args, "--json")
    assert first.returncode == 0, first.stderr
    path = tmp_path / "plan.json"
    path.write_text(first.stdout)
    again = cli("plan", *args, "--plan", str(path), "--json")
    assert again.returncode == 0, again.stderr
    a, b = json.loads(first.stdout), json.loads(again.stdout)
    assert b["strategy"] == "explicit" and a["traffic_bytes"] == b["traffic_bytes"]
    assert [n["kinds"] for n in a["nodes"]] == [n["kinds"] for n in b["nodes"]]
    bad = cli("run", "resnet18", "--accelerators", "4", "--plan", "*: heads heads")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    assert "node conv1 (conv, output [64, 112, 112]) cannot take (heads heads)" in bad.stderr


def test_trick_splits_fc_nodes_by_input_and_the_rest_by_batch():
    graph = load_workload("resnet18")
    plan = make_plan(graph, "trick", Hierarchy.binary(2), 16)
    for node, column in zip(graph.nodes, plan.columns, strict=True):
        assert set(column) == ({"in"} if node.op == "fc" else {"batch"}), node.name


@pytest.mark.parametrize("graph", [residual(), attention()], ids=["residual", "attention"])
@pytest.mark.parametrize("strategy", ["data", "model", "hypar", "trick"])
def test_an_inference_moves_the_forward_stages_alone(graph, strategy):
    """`--phases forward` on a graph: the plan counts the forward pass's bytes (edges'
    forward reduce and gather, the output's reduction), the schedule sends exactly those
    and computes the forward phase alone; bytes sent = received = the plan's traffic."""
    hierarchy, batch = Hierarchy.for_count(4), 8
    options = PlanOptions(("batch", "in", "out", "heads"), phases="forward")
    plan = make_plan(graph, strategy, hierarchy, batch, options=options)
    training = make_plan(graph, strategy, hierarchy, batch,
                         options=PlanOptions(("batch", "in", "out", "heads")))
    assert plan.phases == "forward" and plan.traffic_bytes <= training.traffic_bytes
    schedule = build_schedule(graph, plan, HW)
    assert {key[1].phase for key in schedule.steps} <= {Phase.FORWARD}
    assert {task.phase for task in schedule.computes} == {Phase.FORWARD}
    assert_sent_equals_received_equals(schedule, plan.traffic_bytes)
    result = simulate(graph, plan, HW, SimOptions(engine="analytic"))
    assert result.phases == "forward" and result.traffic_bytes == pytest.approx(
        plan.traffic_bytes, rel=1e-12)


def test_forward_of_the_same_plan_is_its_training_steps_forward_part():
    """The same explicit columns planned for training and for inference: the inference's
    bytes are the training plan's forward stages (fewer), and it computes less."""
    graph = load_workload("bert_base")
    hierarchy, batch = Hierarchy((2, 2)), 4
    text = "*: batch batch"
    options = PlanOptions(("batch", "in", "out", "heads"))
    training = make_plan(graph, "explicit", hierarchy, batch, text, options=options)
    forward = make_plan(graph, "explicit", hierarchy, batch, text,
                        options=PlanOptions(("batch", "in", "out", "heads"),
                                                  phases="forward"))
    assert forward.traffic_bytes == 0 < training.traffic_bytes  # batch: only gradients move
    step = simulate(graph, training, HW, SimOptions(engine="analytic"))
    inference = simulate(graph, forward, HW, SimOptions(engine="analytic"))
    assert inference.latency_cycles < step.latency_cycles / 2


def test_seed_strategies_plan_by_their_training_cost_and_count_the_forward_pass():
    """tofu on resnet18 with --phases forward: its plan of a training step (its paper's
    cost), whose inference moves that plan's forward stages alone."""
    graph, hierarchy = load_workload("resnet18"), Hierarchy((2, 2))
    training = make_plan(graph, "tofu", hierarchy, 16)
    forward = make_plan(graph, "tofu", hierarchy, 16, options=PlanOptions(phases="forward"))
    assert forward.columns == training.columns and forward.search == "its paper's training-cost"
    again = evaluate_plan(graph, "tofu", "", 16, hierarchy, training.columns,
                          phases="forward")
    assert forward.traffic_bytes == again.traffic_bytes < training.traffic_bytes


# --- operators are descriptions (issue "One graph", item 1) --------------------------------

def _conv1d_count(where, a, shapes):
    seq, channels = shapes[0]
    return Counts((seq - a["kernel"] + 1, a["out_features"]),
                  a["out_features"] * channels * a["kernel"])


def _conv1d_describe(a, shapes, shape, dims):
    """A one-dimensional convolution over a token stream's positions: loops P (positions),
    K (output features), C (input features) and a window of `kernel` positions."""
    seq, channels = shapes[0]
    read = Access((Window(Dim.P, a["kernel"], 1, 0, 1, seq), Ix(Dim.C)))
    return Description((Dim.P, Dim.K), {Dim.P: shape[0], Dim.K: shape[1], Dim.C: channels},
                       (read,), Access((Ix(Dim.P), Ix(Dim.K))), reduction=Dim.C,
                       window=(a["kernel"],), channel=Dim.K,
                       weights=Weights(shape[1], channels, a["kernel"]))


@pytest.fixture
def conv1d():
    register_op(OpSpec("conv1d", "a convolution over positions (a test's own operator)",
                       ("out_features", "kernel"), {}, _conv1d_count, _conv1d_describe,
                       weighted=True))
    yield
    unregister_op("conv1d")


def test_a_registered_operator_is_planned_and_simulated_from_its_description(conv1d):
    """One OpSpec with its description, registered from here: its MACs come from the
    description (positions x features x inputs x window), every kind it has a loop for is
    offered, and a plan of it is simulated with bytes sent = received = the plan's."""
    graph = parse_graph({"inputs": {"x": [64, 32]}, "nodes": [
        {"name": "c1", "type": "conv1d", "out_features": 48, "kernel": 3},
        {"name": "a1", "type": "act", "function": "relu"},
        {"name": "c2", "type": "conv1d", "out_features": 16, "kernel": 5}]}, "conv1d")
    c1, c2 = graph.nodes[0], graph.nodes[2]
    assert c1.macs == 62 * 48 * 32 * 3 and c2.macs == 58 * 16 * 48 * 5
    assert graph.macs_per_sample == c1.macs + c2.macs
    hierarchy, batch = Hierarchy((2, 2)), 4
    for kinds in (("batch", "in", "out", "spatial"),):
        plan = make_plan(graph, "hypar", hierarchy, batch, options=PlanOptions(kinds))
        schedule = build_schedule(graph, plan, HW)
        sent = sum(m.bytes for m in schedule.messages)
        assert sent == pytest.approx(plan.traffic_bytes, rel=1e-12)
        forward = sum(cost.macs for task in schedule.computes if task.phase is Phase.FORWARD
                      and graph.nodes[task.layer].desc.channel is not None
                      for cost in task.costs)
        assert forward == graph.macs_per_sample * batch
        result = simulate(graph, plan, HW, SimOptions(engine="analytic"))
        assert result.traffic_bytes == pytest.approx(plan.traffic_bytes, rel=1e-12)
    explicit = make_plan(graph, "explicit", hierarchy, batch,
                         "*: batch batch; c1: spatial out; c2: in spatial",
                               options=PlanOptions(("batch", "in", "out", "spatial")))
    assert explicit.columns[0] == ("spatial", "out") and explicit.traffic_bytes > 0


def test_an_operator_without_a_description_cannot_be_registered():
    with pytest.raises(ValueError, match="has no description"):
        register_op(OpSpec("nothing", "no description", (), {}, lambda w, a, s: Counts(s[0]),
                           None))  # type: ignore[arg-type]
    assert "nothing" not in OPS


def test_a_broadcast_scale_is_planned():
    """Squeeze-and-excitation: a [C, 1, 1] scale times a [C, H, W] map (the broadcast axes
    read their one index): planned and simulated; bytes sent = the plan's traffic."""
    graph = parse_graph({"inputs": {"image": [16, 8, 8]}, "nodes": [
        {"name": "conv", "type": "conv", "out_channels": 32, "kernel": 3, "padding": 1},
        {"name": "squeeze", "type": "global_pool", "inputs": ["conv"]},
        {"name": "excite", "type": "fc", "out_features": 32, "inputs": ["squeeze"]},
        {"name": "gate", "type": "act", "function": "sigmoid"},
        {"name": "shape", "type": "reshape", "shape": [32, 1, 1]},
        {"name": "scale", "type": "mul", "inputs": ["conv", "shape"]}]}, "se")
    scale = graph.nodes[-1]
    assert scale.desc.output == (Dim.K, Dim.P, Dim.Q)
    assert scale.desc.reads[1].axes == (Ix(Dim.K), Whole(1), Whole(1))
    for kinds in (("batch", "in"), ("batch", "in", "out", "spatial")):
        plan = make_plan(graph, "hypar", Hierarchy((2, 2)), 4, options=PlanOptions(kinds))
        schedule = build_schedule(graph, plan, HW)
        assert sum(m.bytes for m in schedule.messages) == pytest.approx(plan.traffic_bytes,
                                                                        rel=1e-12)
    spatial = make_plan(graph, "explicit", Hierarchy((2,)), 2,
                        "*: batch; conv: spatial; scale: spatial",
                              options=PlanOptions(("batch", "spatial")))
    assert spatial.traffic_bytes > 0  # the scale's map arrives split by rows, its gate whole


def test_a_node_that_cannot_be_described_is_refused_by_name():
    """A node on a graph input whose axes have no loop names (four axes) lists but does not
    plan: one line naming it, never a zero cost."""
    graph = parse_graph({"inputs": {"x": [2, 8, 4, 16]}, "nodes": [
        {"name": "odd", "type": "tensor_op", "function": "Pad", "shape": [2, 10, 4, 16]},
        {"name": "relu", "type": "act", "function": "relu"}]}, "odd")
    assert graph.nodes[0].desc is None
    with pytest.raises(InputError, match="node odd \\(tensor_op\\) reads an input of 4 axes"):
        make_plan(graph, "data", Hierarchy((2,)), 4)


def test_a_shape_changing_tensor_op_reads_its_changed_axes_whole():
    """An importer's padding, reduction or gather (`tensor_op` with `from_axes`): each output
    axis keeps its input axis's loop; an axis whose size changed is read whole, so a split
    there gathers the input (never a zero cost); a dropped axis is read whole too."""
    graph = parse_graph({"inputs": {"x": [8, 16]}, "nodes": [
        {"name": "pad", "type": "tensor_op", "function": "Pad", "shape": [10, 16]},
        {"name": "mean", "type": "tensor_op", "function": "ReduceMean", "shape": [10],
         "from_axes": [0]},
        {"name": "fc", "type": "fc", "out_features": 4, "inputs": ["pad"]}]}, "pads")
    pad, mean = graph.node("pad").desc, graph.node("mean").desc
    assert pad.output == ("P", "K") and pad.reads[0].axes == (Whole(8), Ix(Dim.K))
    assert mean.output == ("P",) and mean.reads[0].axes == (Ix(Dim.P), Whole(16))
    assert graph.node("fc").macs == 10 * 16 * 4
    with pytest.raises(InputError, match="from_axes: must list, per output axis, an axis of "
                                         "the first input"):
        parse_graph({"inputs": {"x": [8, 16]}, "nodes": [
            {"name": "bad", "type": "tensor_op", "function": "Gather", "shape": [8],
             "from_axes": [2]}]}, "bad")


def test_a_tensor_read_alike_by_q_k_and_v_moves_once():
    """Issue "One graph", item 2: a layer norm's output (8 tokens x 16 features, batch 1)
    split by tokens over 4 members, read whole by q, k and v (each split by output
    features). By hand: forward, each member gathers the 6 tokens it lacks, 96 elements =
    384 B, 1,536 B in all; backward, each member's q, k and v contributions to the error are
    partial sums over all 128 elements, added where they are and reduce-scattered back by
    tokens, 96 elements sent each, 1,536 B: 3,072 B for the three readers (9,216 B when each
    paid its own). The norm's scale and shift gradients (32 values, partial over tokens) are
    a ring all-reduce: 2 x 4 x 3/4 x 128 B = 768 B."""
    graph = parse_graph({"inputs": {"x": [8, 16]}, "nodes": [
        {"name": "ln", "type": "layer_norm"},
        {"name": "q", "type": "fc", "out_features": 16, "inputs": ["ln"]},
        {"name": "k", "type": "fc", "out_features": 16, "inputs": ["ln"]},
        {"name": "v", "type": "fc", "out_features": 16, "inputs": ["ln"]}]}, "qkv")
    kinds = PlanOptions(("batch", "in", "out", "spatial"))
    plan = make_plan(graph, "explicit", Hierarchy((2, 2)), 1,
                     "ln: spatial spatial; *: out out", options=kinds)
    assert dict(zip(plan.node_names, plan.node_bytes, strict=True)) == {
        "ln": 768.0, "q": 3072.0, "k": 0.0, "v": 0.0}
    schedule = build_schedule(graph, plan, HW)
    assert sum(m.bytes for m in schedule.messages) == plan.traffic_bytes == 3840.0
    best = make_plan(graph, "hypar", Hierarchy((2, 2)), 1, options=kinds)
    assert best.traffic_bytes <= plan.traffic_bytes  # the search counts the gather once too


# --- replicated is a layout (issue "One graph", item 2) ------------------------------------

def _qkv():
    return parse_graph({"inputs": {"x": [8, 16]}, "nodes": [
        {"name": "ln", "type": "layer_norm"},
        {"name": "q", "type": "fc", "out_features": 16, "inputs": ["ln"]},
        {"name": "k", "type": "fc", "out_features": 16, "inputs": ["ln"]},
        {"name": "v", "type": "fc", "out_features": 16, "inputs": ["ln"]}]}, "qkv")


def test_a_replicated_layer_norm_is_read_where_it_is():
    """The layer norm computed whole on each of 4 members (`replicate` at both levels),
    q, k and v split by output features, batch 1. By hand: forward, every member holds the
    norm's output: 0 B; backward, the three readers' errors (partial sums over all 128
    elements, added where they are) are all-reduced into the norm's copies: a reduce-scatter
    and an all-gather, 4 x 96 elements each, 3,072 B; the norm's scale and shift gradients
    are copies on its replicas: 0 B (768 B when the norm was split by tokens, 3,840 B in all)."""
    kinds = PlanOptions(("batch", "in", "out", "spatial", "replicate"))
    plan = make_plan(_qkv(), "explicit", Hierarchy((2, 2)), 1,
                     "ln: replicate replicate; *: out out", options=kinds)
    assert dict(zip(plan.node_names, plan.node_bytes, strict=True)) == {
        "ln": 1536.0, "q": 1536.0, "k": 0.0, "v": 0.0}
    schedule = build_schedule(_qkv(), plan, HW)
    assert_sent_equals_received_equals(schedule, plan.traffic_bytes)
    assert plan.traffic_bytes == 3072.0
    mixed = make_plan(_qkv(), "explicit", Hierarchy((2, 2)), 1,
                      "ln: replicate replicate; q: replicate replicate; *: out out",
                            options=kinds)
    assert mixed.traffic_bytes == 3072.0  # k's and v's partial errors still all-reduced


def test_replicas_hold_copies_not_partial_sums():
    """The redistribution rule on copies: two replicas of a 16-element tensor and a third
    member that needs it receive it once (16 elements); the replicas need nothing; the
    batch-split members' weight gradients are partial sums across the batch and copies
    across the replicas: one all-reduce among the batch halves."""
    from hypar_sim.partition.redistribute import redistribute

    whole = (((0, 16),),)
    stages = redistribute((16,), [whole, whole, ()], [whole, whole, whole],
                          np.array([0, 0, 2]))
    assert stages.reduce.sum() == 0 and stages.gather.sum() == 16
    assert stages.gather.dense()[:, 2].sum() == 16 and stages.gather.dense()[:, :2].sum() == 0
    graph = parse_graph({"inputs": {"x": [32]}, "nodes": [
        {"name": "fc", "type": "fc", "out_features": 32}]}, "fc")
    kinds = PlanOptions(("batch", "replicate"))
    plan = make_plan(graph, "explicit", Hierarchy((2, 2)), 4, "fc: batch replicate",
                     options=kinds)
    # 32 x 32 = 1,024 weights (4,096 B), partial over the two batch halves, copies within
    # each: the halves' first members 0 and 2 reduce-scatter (each sends the other 512: 4,096
    # B in all), then 0 and 2 each receive the other's half and 1 and 3 all of it (512 +
    # 512 + 1,024 + 1,024 elements: 12,288 B). Data parallelism's ring all-reduce over four
    # partials: 2 x 4 x 3/4 x 4,096 B = 24,576 B.
    assert plan.traffic_bytes == 4096 + 12288
    data = make_plan(graph, "data", Hierarchy((2, 2)), 4, options=kinds)
    assert data.traffic_bytes == 24576


def test_bert_base_offers_a_replicated_layer_norm():
    """bert_base at batch 1 on 4 accelerators with the transformer kinds and replicate:
    every layer norm may stay whole; the plan with them replicated and the rest as Megatron
    splits it is planned and simulated, bytes sent = received = the plan's."""
    graph = load_workload("bert_base")
    kinds = PlanOptions(("batch", "in", "out", "heads", "replicate"))
    norms = [node.name for node in graph.nodes if node.op == "layer_norm"]
    assert norms
    text = "*: replicate replicate; " + "; ".join(
        f"{node.name}: out out" for node in graph.nodes
        if node.op == "fc" and node.name.endswith(("_q", "_k", "_v", "fc1")))
    plan = make_plan(graph, "explicit", Hierarchy((2, 2)), 1, text, options=kinds)
    for name in norms:
        assert plan.columns[plan.node_names.index(name)] == ("replicate", "replicate")
    schedule = build_schedule(graph, plan, HW)
    assert_sent_equals_received_equals(schedule, plan.traffic_bytes)


def test_a_product_broadcasts_its_leading_axes_and_an_fc_follows_a_transpose():
    """A (4, 8, 16) x B (16, 32): B's missing leading axis is broadcast (it crashed the
    redistribution); B reshaped to (1, 16, 32) reads its one index, not the output's four
    (whose part a member's box would have read outside B). An fc after a transposed token
    stream names its leading axis anew (the graph did not load)."""
    def graph(b_nodes):
        return parse_graph({"inputs": {"a": [4, 8, 16], "x": [16, 16]}, "nodes": [
            {"name": "bn", "type": "fc", "out_features": 32, "inputs": ["x"]}, *b_nodes,
            {"name": "an", "type": "act", "function": "relu", "inputs": ["a"]},
            {"name": "mm", "type": "matmul", "inputs": ["an", b_nodes[-1]["name"]
                                                         if b_nodes else "bn"]},
            {"name": "out", "type": "fc", "out_features": 10}]}, "mm")
    plain = graph([])
    shaped = graph([{"name": "b3", "type": "reshape", "shape": [1, 16, 32]}])
    columns = plain.node("mm").desc.output[-1]
    assert plain.node("mm").desc.reads[1].axes == (Ix(Dim.C), Ix(columns))
    assert shaped.node("mm").desc.reads[1].axes[0] == Whole(1)
    for g in (plain, shaped):
        assert g.node("mm").macs == 4 * 8 * 16 * 32
        plan = make_plan(g, "hypar", Hierarchy((2, 2)), 8,
                         options=PlanOptions(("batch", "in", "out", "heads")))
        schedule = build_schedule(g, plan, HW)
        assert_sent_equals_received_equals(schedule, plan.traffic_bytes)
    transposed = parse_graph({"inputs": {"ids": [32]}, "nodes": [
        {"name": "emb", "type": "embedding", "vocab": 100, "dim": 32},
        {"name": "t", "type": "transpose", "perm": [1, 0]},
        {"name": "fc", "type": "fc", "out_features": 16}]}, "t")
    assert transposed.node("fc").desc.output == (Dim.Q, Dim.K)  # P is the stream's other axis
    assert transposed.node("fc").macs == 32 * 32 * 16


@pytest.mark.parametrize(("text", "fragment"), [
    ("*: batch batch; *: in in", "* is given twice"),
    ("fc: in in; fc: out out; *: batch batch", "fc is given twice"),
    ("nosuch.json", "nosuch.json: plan file not found"),
])
def test_node_plans_refuse_repeats_and_missing_files(text, fragment):
    with pytest.raises(InputError, match=re.escape(fragment)):
        make_plan(load_workload("resnet18"), "explicit", Hierarchy((2, 2)), 8, text)


@pytest.mark.parametrize("body", ['{"nodes": 3}', '{"nodes": [{"name": "conv1", "kinds": "in"}]}'])
def test_a_malformed_node_plan_file_is_one_line(tmp_path, body):
    path = tmp_path / "plan.json"
    path.write_text(body)
    with pytest.raises(InputError, match="not a plan file") as info:
        make_plan(load_workload("resnet18"), "explicit", Hierarchy((2, 2)), 8, str(path))
    assert "\n" not in str(info.value)


def test_a_replica_above_a_batch_split_reduces_within_itself():
    """`replicate` at the top level, `batch` below, on 2 x 2: each top half holds a copy of
    the same two batch halves, so each reduces its fc's weight gradient within itself
    (level 2), 2 x 2 x 2 x 1/2 x 262,144 B, and nothing crosses the top level (the first
    replica reduced for both, and the second fetched the sum across the top)."""
    graph = parse_graph({"inputs": {"x": [256]}, "nodes": [
        {"name": "a", "type": "act", "function": "relu"},
        {"name": "fc", "type": "fc", "out_features": 256}]}, "g")
    plan = make_plan(graph, "explicit", Hierarchy((2, 2)), 8, "*: rep batch",
                     options=PlanOptions(("batch", "replicate")))
    assert plan.traffic_bytes_per_level == (0.0, 1048576.0)
