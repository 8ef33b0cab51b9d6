"""Simulating graph networks: invariants (bytes sent = received = planner traffic, energy
parts sum, bit-identical reruns), an ONNX block simulates as its YAML, capacity, the CLI."""

from __future__ import annotations

import json
from functools import partial

import pytest

from hypar_sim.errors import InputError
from hypar_sim.hardware.config import load_hardware
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.planner.options import PlanOptions
from hypar_sim.planner.plan import make_plan
from hypar_sim.request import make_request
from hypar_sim.runner import SimOptions, simulate, simulate_request
from hypar_sim.sim.schedule import build_schedule
from hypar_sim.workload.graph import parse_graph
from hypar_sim.workload.network import load_workload
from tests.conftest import assert_sent_equals_received_equals, run_cli
from tests.test_graph_plan import attention, inception, residual

HW = load_hardware()


def run(graph, strategy, accelerators, batch, sim=None):
    """One step of `graph` planned by `strategy` (the run's request, as the CLI builds it)."""
    return simulate_request(make_request(graph, accelerators=accelerators, batch=batch,
                                         strategy=strategy, sim=sim))


CASES = [(residual(), ("batch", "in")), (inception(), ("batch", "in", "out", "spatial")),
         (attention(), ("batch", "in", "out", "heads"))]


@pytest.mark.parametrize("graph, kinds", CASES, ids=["residual", "inception", "attention"])
@pytest.mark.parametrize("accelerators", [4, 6])
@pytest.mark.parametrize("topology", ["htree", "torus", "ideal"])
def test_bytes_sent_equal_received_equal_planner_traffic(graph, kinds, accelerators, topology):
    hw = HW
    plan = make_plan(graph, "hypar", Hierarchy.for_count(accelerators), 12,
                     options=PlanOptions(kinds))
    schedule = build_schedule(graph, plan, hw)
    assert_sent_equals_received_equals(schedule, plan.traffic_bytes)
    result = simulate(graph, plan, hw, SimOptions(topology=topology, bucket_mb=0))
    assert result.traffic_bytes == pytest.approx(plan.traffic_bytes, rel=1e-12)
    assert result.traffic_bytes_per_level == pytest.approx(plan.traffic_bytes_per_level,
                                                           rel=1e-12)
    bucketed = simulate(graph, plan, hw, SimOptions(topology=topology))
    assert bucketed.traffic_bytes == pytest.approx(plan.traffic_bytes, rel=1e-12)
    assert sum(a.sent_bytes for a in result.per_accelerator) == pytest.approx(
        plan.traffic_bytes, rel=1e-12)
    assert sum(result.energy_breakdown_pj.values()) == result.energy_pj
    assert result.latency_cycles > 0 and len(result.per_layer) == len(graph.nodes)


def test_reruns_are_bit_identical_and_engines_agree_roughly():
    graph = load_workload("resnet18")
    first = run(graph, "hypar", 4, 16)
    second = run(graph, "hypar", 4, 16)
    assert first.latency_cycles == second.latency_cycles
    assert first.energy_breakdown_pj == second.energy_breakdown_pj
    analytic = run(graph, "hypar", 4, 16, SimOptions(engine="analytic"))
    assert analytic.latency_cycles == pytest.approx(first.latency_cycles, rel=0.1)
    assert analytic.traffic_bytes == first.traffic_bytes


def test_buckets_fuse_gradient_steps_and_keep_the_bytes():
    """DDP-style buckets: ResNet-18's 41 weighted nodes' all-reduces in a few steps."""
    graph = load_workload("resnet18")
    hw = HW
    plan = make_plan(graph, "data", Hierarchy.binary(2), 16)
    one_each = build_schedule(graph, plan, hw, bucket_bytes=0)
    fused = build_schedule(graph, plan, hw)
    gradients = [key for key in one_each.steps if key[1].value == "gradient"]
    buckets = [key for key in fused.steps if key[1].value == "gradient"]
    assert len(gradients) == 41 and 1 < len(buckets) <= graph.params * 4 / (25 * 2**20) + 1
    assert sum(m.bytes for m in fused.messages) == pytest.approx(
        sum(m.bytes for m in one_each.messages), rel=1e-12)


def test_compute_counts_every_mac_of_the_forward_pass():
    """The forward phase's MACs over all members are the graph's MACs x the batch (every
    node's box covers its output once; a split reduction's members share its MACs)."""
    graph = load_workload("mobilenet_v2")
    hw = HW
    plan = make_plan(graph, "hypar", Hierarchy.binary(2), 8,
                     options=PlanOptions(("batch", "in", "out")))
    schedule = build_schedule(graph, plan, hw)
    forward = sum(cost.macs for task in schedule.tasks
                  if getattr(task, "phase", None) is not None and task.phase.value == "forward"
                  and graph.nodes[task.layer].op in ("conv", "fc")
                  for cost in task.costs)
    assert forward == graph.macs_per_sample * 8


def test_onnx_block_simulates_as_its_yaml(tmp_path):
    from tests.test_onnx_import import CNN_YAML, cnn_block

    imported = load_workload(str(cnn_block(tmp_path)))
    written = parse_graph(CNN_YAML, "yaml")
    a = run(imported, "hypar", 4, 8)
    b = run(written, "hypar", 4, 8)
    assert a.latency_cycles == b.latency_cycles and a.traffic_bytes == b.traffic_bytes
    assert a.energy_pj == b.energy_pj


def test_a_batch_too_large_for_gpt2_is_reported():
    """The planner refuses it before the simulator would (59.4 GiB per cube at the least:
    weights, gradients and what each node keeps for its backward pass)."""
    with pytest.raises(InputError, match="capacity: no plan of kinds batch,in fits gpt2_small in "
                                         "a cube: the leanest needs at least 59.4 GiB"):
        run(load_workload("gpt2_small"), "data", 2, 64)


@pytest.mark.slow  # a default run on 2 cores stays under 5 minutes
def test_cli_runs_and_compares_a_graph(tmp_path):
    cli = partial(run_cli, cwd=tmp_path)
    run = cli("run", "resnet18", "--accelerators", "4", "--batch", "16", "--json")
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["network"] == "resnet18" and len(result["per_layer"]) == 68
    compare = cli("compare", "mobilenet_v2", "--accelerators", "4", "--batch", "16",
                  "--engine", "analytic")
    assert compare.returncode == 0 and "hypar" in compare.stdout and "model" in compare.stdout


def test_inception_branches_run_side_by_side_when_they_fit():
    """On one cube at batch 1 each 1x1 branch of the block needs a quarter of the PUs: the
    three run side by side, and the step takes less than its computations one after
    another."""
    from hypar_sim.sim.schedule import Parallel

    graph = inception()
    hw = HW
    plan = make_plan(graph, "data", Hierarchy.for_count(1), 1)
    schedule = build_schedule(graph, plan, hw)
    together = [[graph.nodes[c.layer].name for c in task.computes] for task in schedule.tasks
                if isinstance(task, Parallel) and task.computes[0].phase.value == "forward"]
    assert ["b1", "b2r", "b3r"] in together
    for task in schedule.tasks:
        if isinstance(task, Parallel):
            assert sum(c.costs[0].pus_used for c in task.computes) <= hw.pus_per_cube
    alone = sum(c.costs[0].cycles for c in schedule.computes)
    result = simulate(graph, plan, hw)
    assert result.latency_cycles < 0.8 * alone


@pytest.mark.parametrize("name", ["inception_v1", "resnet18", "mobilenet_v2", "bert_base"])
@pytest.mark.parametrize("engine", ["des", "analytic"])
def test_time_shares_add_up_to_the_step(name, engine):
    """Computations side by side (an inception block's branches) count once, as their
    longest: compute, DRAM stalls and communication are shares of one step (they summed to
    102% on inception_v1)."""
    result = run(load_workload(name), "hypar", 4, 8, SimOptions(engine=engine))
    assert sum(result.time_shares.values()) == pytest.approx(1.0, abs=1e-6)
