"""The seed papers' planners on graph networks, side by side: every node gets a column its
layout offers, and the simulator sends exactly the bytes the plan says."""

from __future__ import annotations

import pytest

from hypar_sim.hardware.config import load_hardware
from hypar_sim.partition import node_layout
from hypar_sim.partition.axes import sites as graph_sites
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.planner.plan import make_plan
from hypar_sim.runner import SimOptions, simulate
from hypar_sim.workload.network import load_workload


def _offered(graph, batch, hierarchy, columns) -> bool:
    return all(node_layout.offered(site, batch, column, hierarchy)
               for site, column in zip(graph_sites(graph), columns, strict=True))


@pytest.mark.parametrize("strategy", ["tofu", "accpar",
                                      pytest.param("grid", marks=pytest.mark.slow)])
def test_resnet18_plans_and_runs(strategy):
    """16 accelerators, batch 64, each strategy's own kinds: offered columns, and the analytic
    engine moves exactly the plan's bytes."""
    graph, hierarchy = load_workload("resnet18"), Hierarchy.for_count(16)
    plan = make_plan(graph, strategy, hierarchy, 64)
    assert plan.strategy == strategy and _offered(graph, 64, hierarchy, plan.columns)
    result = simulate(graph, plan, load_hardware(),
                            SimOptions(engine="analytic"))
    assert result.traffic_bytes == pytest.approx(plan.traffic_bytes, rel=1e-12)


@pytest.mark.parametrize(("strategy", "network", "batch"), [
    ("tofu", "mobilenet_v2", 48), ("accpar", "inception_v1", 12), ("grid", "bert_base", 12)])
def test_a_three_by_two_hierarchy(strategy, network, batch):
    """A 3-way level above a 2-way one: a column of two kinds per node, every one offered."""
    graph, hierarchy = load_workload(network), Hierarchy((3, 2))
    plan = make_plan(graph, strategy, hierarchy, batch)
    assert all(len(column) == 2 for column in plan.columns)
    assert _offered(graph, batch, hierarchy, plan.columns) and plan.traffic_bytes > 0
