"""Every strategy on the graphs users bring (issue "One graph", item 4): resnet50,
mobilenet_v2, bert_base and gpt2_small planned and run by every strategy, for a training
step and an inference, optimal for every objective, an explicit plan read back from
`plan --json`, and `compare` with them all; each run sends and receives exactly the bytes
its plan says. The whole matrix is slow (under 3 minutes on 2 cores); a few run by default."""

from __future__ import annotations

import json

import pytest

import hypar_sim
from hypar_sim.errors import InputError
from hypar_sim.planner.strategies import STRATEGIES
from hypar_sim.results import SimResult
from tests.conftest import run_cli

NETWORKS = ("resnet50", "mobilenet_v2", "bert_base", "gpt2_small")
#: explicit is planned from another plan below; exhaustive is refused on these (too many)
SEARCHED = tuple(s for s in list(STRATEGIES) if s not in ("explicit", "exhaustive", "optimal"))
FAST = {("resnet50", "hypar"), ("resnet50", "tofu"), ("bert_base", "grid"),
        ("bert_base", "accpar")}
SIZE = {"accelerators": 4, "batch": 4}


def _matrix(pairs):
    return [pytest.param(*pair, marks=() if pair[:2] in FAST else pytest.mark.slow)
            for pair in pairs]


def _runs_as_planned(network: str, strategy: str, **options) -> SimResult:
    """Plan and run; the run moves the plan's bytes, every member's sends received."""
    plan = hypar_sim.plan(network, strategy, **SIZE, **options)
    result = hypar_sim.simulate(network, strategy, engine="analytic", **SIZE, **options)
    sent = sum(a.sent_bytes for a in result.per_accelerator)
    received = sum(a.received_bytes for a in result.per_accelerator)
    assert result.traffic_bytes == pytest.approx(plan.traffic_bytes, rel=1e-12, abs=1e-6)
    assert sent == pytest.approx(plan.traffic_bytes, rel=1e-12, abs=1e-6)
    assert received == pytest.approx(plan.traffic_bytes, rel=1e-12, abs=1e-6)
    assert result.latency_s > 0 and result.energy_j > 0
    return result


@pytest.mark.parametrize(("network", "strategy", "phases"), _matrix(
    (n, s, p) for n in NETWORKS for s in SEARCHED for p in ("training", "forward")))
def test_every_strategy_plans_and_runs_every_network(network, strategy, phases):
    _runs_as_planned(network, strategy, phases=phases)


@pytest.mark.slow
@pytest.mark.parametrize("network", NETWORKS)
@pytest.mark.parametrize("objective", ["bytes", "time", "energy"])
def test_optimal_for_every_objective(network, objective):
    """On 2 accelerators (one level: the exact search over every kind is small); never more
    bytes than hypar for bytes."""
    plan = hypar_sim.plan(network, "optimal", accelerators=2, batch=4, objective=objective)
    assert plan.objective == objective
    if objective == "bytes":
        hypar = hypar_sim.plan(network, "hypar", accelerators=2, batch=4)
        assert plan.traffic_bytes <= hypar.traffic_bytes * (1 + 1e-12)
    result = hypar_sim.simulate(network, "optimal", accelerators=2, batch=4, objective=objective,
                                engine="analytic")
    assert result.traffic_bytes == pytest.approx(plan.traffic_bytes, rel=1e-12, abs=1e-6)


@pytest.mark.parametrize("network", [pytest.param(n, marks=() if n == "bert_base"
                                                  else pytest.mark.slow) for n in NETWORKS])
def test_an_explicit_plan_reads_back_from_plan_json(network, tmp_path):
    """`plan --json` of tofu's plan, given to --plan: the same columns and bytes, run."""
    found = run_cli("plan", network, "--strategy", "tofu", "--accelerators", "4", "--batch", "4",
                    "--json", cwd=tmp_path)
    assert found.returncode == 0, found.stderr
    saved = tmp_path / "plan.json"
    saved.write_text(found.stdout)
    plan = hypar_sim.plan(network, "explicit", plan_text=str(saved),
                          kinds=("batch", "in", "out", "spatial", "heads", "groups"), **SIZE)
    data = json.loads(found.stdout)
    assert [list(c) for c in plan.columns] == [node["kinds"] for node in data["nodes"]]
    assert plan.traffic_bytes == pytest.approx(data["traffic_bytes"], rel=1e-12)
    _runs_as_planned(network, "explicit", plan_text=str(saved),
                     kinds=("batch", "in", "out", "spatial", "heads", "groups"))


@pytest.mark.slow
@pytest.mark.parametrize("network", NETWORKS)
def test_compare_runs_every_strategy(network, tmp_path):
    strategies = ",".join(("data", *(s for s in SEARCHED if s != "data"), "optimal"))
    result = run_cli("compare", network, "--strategies", strategies, "--accelerators", "2",
                     "--batch", "4", "--engine", "analytic", "--workers", "1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    for strategy in strategies.split(","):
        assert strategy in result.stdout


@pytest.mark.parametrize("strategy", ["accpar", "grid", "soybean", "tofu"])
def test_a_seed_strategy_refuses_the_replicate_kind(strategy):
    """Its paper's search has no replicated layout: asked for one, it says so in one line
    (it ignored it before) and names the strategies that search it."""
    with pytest.raises(InputError, match=f"strategy {strategy} searches its paper's layouts, "
                                         "which have no kind like replicate; hypar, optimal"):
        hypar_sim.plan("resnet18", strategy, accelerators=4, batch=8,
                       kinds=("batch", "in", "replicate"))
