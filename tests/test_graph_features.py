"""Features that were chain-only, on graph networks (issue "One graph", item 4): an
explicit per-node `--plan` that reads back from `plan --json`, `trick`, `--phases
forward`."""

from __future__ import annotations

import json
import re
from collections import defaultdict

import pytest

from hypar_sim.errors import InputError
from hypar_sim.hardware.config import load_hardware
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.steps import Phase
from hypar_sim.planner.graph_plan import make_graph_plan
from hypar_sim.planner.plan_text import parse_node_plan
from hypar_sim.planner.strategies import PlanOptions
from hypar_sim.runner import SimOptions, simulate
from hypar_sim.sim.graph_schedule import build_graph_schedule
from hypar_sim.workload.network import load_workload
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
    plan = make_graph_plan(graph, "trick", Hierarchy.binary(2), 16)
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
    plan = make_graph_plan(graph, strategy, hierarchy, batch, options=options)
    training = make_graph_plan(graph, strategy, hierarchy, batch,
                               options=PlanOptions(("batch", "in", "out", "heads")))
    assert plan.phases == "forward" and plan.traffic_bytes <= training.traffic_bytes
    schedule = build_graph_schedule(graph, plan, HW)
    assert {key[1].phase for key in schedule.steps} <= {Phase.FORWARD}
    assert {task.phase for task in schedule.computes} == {Phase.FORWARD}
    sent, received = defaultdict(float), defaultdict(float)
    for message in schedule.messages:
        sent[message.src] += message.bytes
        received[message.dst] += message.bytes
    assert sum(sent.values()) == pytest.approx(plan.traffic_bytes, rel=1e-12)
    assert sum(received.values()) == pytest.approx(plan.traffic_bytes, rel=1e-12)
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
    training = make_graph_plan(graph, "explicit", hierarchy, batch, text, options=options)
    forward = make_graph_plan(graph, "explicit", hierarchy, batch, text,
                              options=PlanOptions(("batch", "in", "out", "heads"),
                                                  phases="forward"))
    assert forward.traffic_bytes == 0 < training.traffic_bytes  # batch: only gradients move
    step = simulate(graph, training, HW, SimOptions(engine="analytic"))
    inference = simulate(graph, forward, HW, SimOptions(engine="analytic"))
    assert inference.latency_cycles < step.latency_cycles / 2


def test_seed_strategies_keep_their_training_cost(cli):
    result = cli("plan", "resnet18", "--strategy", "tofu", "--phases", "forward")
    assert result.returncode == 2 and "plans by its paper's cost of a training step" in \
        result.stderr
