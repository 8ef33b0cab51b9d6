"""Inference (`--phases forward`): plans and steps of the forward pass alone."""

from __future__ import annotations

import pytest

from hypar_sim.hardware.config import load_hardware
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.steps import Phase
from hypar_sim.planner.options import PlanOptions
from hypar_sim.planner.plan import evaluate_plan, make_plan
from hypar_sim.runner import SimOptions, simulate
from hypar_sim.sim.schedule import build_schedule
from hypar_sim.workload.network import load_network, load_workload
from tests.conftest import PAPER, assert_sent_equals_received_equals


@pytest.mark.parametrize("model", ["layout", "layout_levels", "paper"])
@pytest.mark.parametrize("strategy", ["hypar", "model", "trick"])
def test_inference_moves_only_forward_bytes_and_they_add_up(model, strategy):
    """An inference plan's steps are all forward transfers (no gradient exchange, no error),
    its tasks are forward computations; every member sends and receives what the planner
    counts, in both engines; the same plan costs no more than its training step. (Batch 2 on
    4 accelerators under the layout models, so that HyPar must split something else, 4 for
    the trick's batch-split conv layers; the paper model needs a batch the array divides, and
    HyPar then moves nothing.)"""
    net, hierarchy = load_network("cifar_c"), Hierarchy((2, 2))
    batch = 16 if model == "paper" else 4 if strategy == "trick" else 2
    config = load_hardware()
    kinds = ("batch", "in") if model == "paper" else ("batch", "in", "out", "spatial")
    plan = make_plan(net, strategy, hierarchy, batch, config=config,
                     options=PlanOptions(kinds, traffic_model=model, phases="forward"))
    assert plan.phases == "forward"
    schedule = build_schedule(net, plan, config)
    assert all(kind.phase is Phase.FORWARD for _, kind in schedule.steps)
    assert bool(schedule.steps) == (plan.traffic_bytes > 0)
    assert plan.traffic_bytes > 0 or (strategy, model) == ("hypar", "paper")
    assert {task.phase for task in schedule.computes} == {Phase.FORWARD}
    sent = assert_sent_equals_received_equals(schedule, plan.traffic_bytes)
    for engine in ("des", "analytic"):
        result = simulate(net, plan, config, SimOptions(engine=engine))
        assert result.phases == "forward"
        assert result.traffic_bytes == pytest.approx(plan.traffic_bytes, rel=1e-12)
        assert [a.sent_bytes for a in result.per_accelerator] == \
            pytest.approx([sent[m] for m in range(4)])
    training = evaluate_plan(net, strategy, "", batch, hierarchy, plan.columns,
                             traffic_model=model)
    assert plan.traffic_bytes <= training.traffic_bytes
    assert simulate(net, training, config).latency_cycles > result.latency_cycles


def test_data_parallel_inference_moves_nothing_and_hypar_then_chooses_it():
    """Split by batch, the forward pass needs no bytes from another accelerator: data
    parallelism's inference traffic is 0, and HyPar's inference plan for VGG-A at batch 256
    is batch everywhere, where its training plan splits the fc layers by input channel."""
    net = load_network("vgg_a")
    inference = PlanOptions(traffic_model="paper", phases="forward")
    assert make_plan(net, "data", 4, 256, options=inference).traffic_bytes == 0
    hypar = make_plan(net, "hypar", 4, 256, options=inference)
    assert hypar.traffic_bytes == 0
    assert {kind for row in hypar.choices for kind in row} == {"batch"}
    training = make_plan(net, "hypar", 4, 256, options=PAPER)
    assert "in" in {kind for row in training.choices for kind in row}


def test_single_sample_inference_splits_the_sample():
    """Batch 1 cannot be split by batch: the inference plan splits channels and rows, and
    moves less than the training step of the same plan."""
    net = load_network("vgg_a")
    options = PlanOptions(("batch", "in", "out", "spatial"), phases="forward")
    plan = make_plan(net, "hypar", 4, 1, options=options)
    assert "batch" not in {kind for row in plan.choices for kind in row}
    assert 0 < plan.traffic_bytes < evaluate_plan(net, "hypar", "", 1, Hierarchy.binary(4),
                                                  plan.columns).traffic_bytes


@pytest.mark.parametrize("strategy", ["soybean", "accpar", "tofu", "grid"])
def test_a_seed_strategy_runs_its_training_plan_forward(strategy):
    """A seed planner costs a training step (its paper's cost): with --phases forward its
    plan is that of a training step, counted for the forward pass alone."""
    net = load_workload("cifar_c")
    training = make_plan(net, strategy, Hierarchy.for_count(4), 64)
    forward = make_plan(net, strategy, Hierarchy.for_count(4), 64,
                        options=PlanOptions(phases="forward"))
    assert forward.columns == training.columns and forward.phases == "forward"
    assert forward.traffic_bytes < training.traffic_bytes


@pytest.mark.parametrize("args, fragment", [
    (("--phases", "forward", "--objective", "time"), "--objective: time is estimated"),
    (("--phases", "backward"), "--phases"),
])
def test_bad_inference_input_is_one_line_exit_2(cli, args, fragment):
    result = cli("run", "cifar_c", *args)
    assert result.returncode == 2 and fragment in result.stderr
    assert "Traceback" not in result.stderr


def test_cli_runs_an_inference_and_refuses_what_it_cannot_do(cli):
    """`run`, `compare` say an inference is one, on chains and graphs; the bound is
    refused."""
    done = cli("run", "cifar_c", "--phases", "forward", "--batch", "2", "--kinds",
               "batch,in,out,spatial", "--engine", "analytic")
    assert done.returncode == 0, done.stderr
    assert "inference (forward pass only)" in done.stdout
    graph = cli("run", "resnet18", "--phases", "forward", "--accelerators", "4", "--batch", "8",
                "--engine", "analytic")
    assert graph.returncode == 0 and "inference (forward pass only)" in graph.stdout
    bound = cli("plan", "cifar_c", "--phases", "forward", "--bound")
    assert bound.returncode == 2 and "--bound: the lower bound counts a training" in bound.stderr
    compared = cli("compare", "cifar_c", "--phases", "forward", "--strategies", "model,hypar",
                   "--engine", "analytic")
    assert compared.returncode == 0, compared.stderr
    assert "inference (forward pass only)" in compared.stdout
    assert "lower bound" not in compared.stdout


def test_the_api_plans_and_simulates_an_inference():
    """`api.plan` and `api.simulate` take `phases`: the same plan and bytes as make_plan."""
    from hypar_sim import api

    options = dict(accelerators=4, batch=2, kinds="batch,in,out,spatial", phases="forward")
    planned = api.plan("cifar_c", **options)
    result = api.simulate("cifar_c", engine="analytic", **options)
    assert planned.phases == result.phases == "forward"
    assert result.traffic_bytes == pytest.approx(planned.traffic_bytes, rel=1e-12)
    assert planned.traffic_bytes == make_plan(
        load_network("cifar_c"), "hypar", Hierarchy((2, 2)), 2,
        options=PlanOptions(("batch", "in", "out", "spatial"), phases="forward")).traffic_bytes
