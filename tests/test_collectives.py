"""Collective algorithms (`partition.collectives`): the same bytes per member whichever
sends them, the level-by-level stages of `levels`, and its timing in both engines; the
members' products under the redistribution rule."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hypar_sim.hardware.config import load_hardware
from hypar_sim.hardware.transfer import rounds_cycles
from hypar_sim.partition.collectives import COLLECTIVES, levels
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.moved import Moved
from hypar_sim.partition.redistribute import member_products
from hypar_sim.partition.steps import StepMessages, TransferKind
from hypar_sim.planner.options import PlanOptions
from hypar_sim.planner.plan import make_plan
from hypar_sim.runner import SimOptions, simulate
from hypar_sim.workload.graph import parse_graph
from hypar_sim.workload.network import load_network
from tests.test_chain_graphs import nodes_of


def _all_to_all(members: int, block, size: float) -> Moved:
    matrix = np.zeros((members, members))
    for a in block:
        for b in block:
            if a != b:
                matrix[a, b] = size
    return Moved.from_dense(matrix)


def _rows(transfers) -> StepMessages:
    """The transfers a message a row (a ring's rounds written out)."""
    return StepMessages(0, TransferKind.GRADIENT, transfers.src, transfers.dst,
                        transfers.bytes, np.zeros_like(transfers.src), transfers.round,
                        repeats=transfers.repeats).expanded()


def _sent(transfers) -> dict[int, float]:
    sent: dict[int, float] = defaultdict(float)
    transfers = _rows(transfers)
    for src, size in zip(transfers.src.tolist(), transfers.bytes.tolist(), strict=True):
        sent[src] += size
    return dict(sent)


@pytest.mark.parametrize("sizes", [(2, 2, 2), (2, 3, 2), (3,), (4, 3)])
@pytest.mark.parametrize("reduce", [True, False])
def test_every_collective_sends_each_member_k_minus_one_parts(sizes, reduce):
    """A uniform all-to-all of b among all k members: each member sends (k - 1) b and
    receives as much, under ring, levels and direct alike."""
    hierarchy = Hierarchy(sizes)
    k = hierarchy.members
    matrix = _all_to_all(k, range(k), 6.0)
    for name, collective in COLLECTIVES.items():
        transfers = collective(matrix, hierarchy, reduce)
        assert _sent(transfers) == pytest.approx({m: (k - 1) * 6.0 for m in range(k)}), name
        received = np.bincount(transfers.dst, transfers.sent_bytes, minlength=k)
        assert received == pytest.approx(np.full(k, (k - 1) * 6.0)), name


def test_levels_stage_bytes_and_order_on_2x3x2():
    """On 2 x 3 x 2 (k = 12, b = 1): the stage at level l is s_l - 1 rounds in which every
    member sends b k / P_l to its successor in its level group (P = 2, 6, 12 from the
    bottom: 6, 2, 1 bytes); a reduce-scatter runs the bottom level first, an all-gather
    the top level first."""
    hierarchy = Hierarchy((2, 3, 2))
    matrix = _all_to_all(12, range(12), 1.0)
    expected = {2: 6.0, 1: 2.0, 0: 1.0}  # level -> bytes per message
    for reduce, order in ((True, (2, 1, 1, 0)), (False, (0, 1, 1, 2))):
        transfers = _rows(levels(matrix, hierarchy, reduce))
        met = hierarchy.meeting_levels(transfers.src, transfers.dst)
        assert transfers.round.max() == len(order) - 1
        for round_, level in enumerate(order):
            here = transfers.round == round_
            assert set(met[here].tolist()) == {level}
            assert set(transfers.bytes[here].tolist()) == {expected[level]}
            assert sorted(transfers.src[here].tolist()) == list(range(12))
            successor = [hierarchy.group(m, level)[(hierarchy.coords(m)[level] + 1)
                                                   % hierarchy.sizes[level]]
                         for m in transfers.src[here].tolist()]
            assert transfers.dst[here].tolist() == successor


def test_levels_on_a_block_of_some_levels_and_a_block_of_none():
    """Members that agree at level 1 of 2 x 3 x 2 (a block over levels 0 and 2: 4 members,
    two stages); a uniform block that spans no set of whole levels goes as a ring."""
    hierarchy = Hierarchy((2, 3, 2))
    block = [m for m in range(12) if hierarchy.coords(m)[1] == 1]
    transfers = _rows(levels(_all_to_all(12, block, 3.0), hierarchy, True))
    assert set(transfers.src.tolist()) == set(block) and transfers.round.max() == 1
    assert _sent(transfers) == pytest.approx({m: 3 * 3.0 for m in block})
    odd = levels(_all_to_all(4, [0, 1, 2], 5.0), Hierarchy((2, 2)), True)
    ring = COLLECTIVES["ring"](_all_to_all(4, [0, 1, 2], 5.0), Hierarchy((2, 2)), True)
    assert [odd.src.tolist(), odd.dst.tolist(), odd.round.tolist()] == \
        [ring.src.tolist(), ring.dst.tolist(), ring.round.tolist()]


def test_rounds_follow_each_other():
    """Equal rounds multiply exactly (a ring: k - 1 times one round); unequal ones add."""
    t = 0.1 + 0.2
    assert rounds_cycles({r: t for r in range(1022)}) == t * 1022
    assert rounds_cycles({0: 8.0, 1: 4.0, 2: 4.0, 3: 1.0}) == 17.0
    assert rounds_cycles({}) == 0.0


@pytest.mark.parametrize("sizes", [(2, 2, 2, 2), (3, 2, 2)])
@pytest.mark.parametrize("strategy", ["data", "hypar"])
@pytest.mark.parametrize("as_graph", [False, True])
def test_levels_model_keeps_the_plans_and_bytes_and_the_engines_agree(sizes, strategy,
                                                                       as_graph):
    """`layout_levels` plans as `layout` (same bytes) and sends them in fewer rounds (fewer
    events); every member sends what the planner counts. Where only collectives move bytes
    (data parallelism) the engines agree within 0.1% on the H-tree; hypar's relayouts on a
    3-way level differ by 8%, as under `layout` (the analytic engine's contention). The same
    on the chain written as a graph."""
    hierarchy = Hierarchy(sizes)
    net = load_network("cifar_c")
    if as_graph:
        net = parse_graph(nodes_of(net), "cifar_c")
    config = load_hardware()
    plan = make_plan if as_graph else make_plan
    plans = {model: plan(net, strategy, hierarchy, 96, options=PlanOptions(traffic_model=model))
             for model in ("layout", "layout_levels")}
    assert plans["layout"].columns == plans["layout_levels"].columns
    assert plans["layout"].traffic_bytes == \
        pytest.approx(plans["layout_levels"].traffic_bytes, rel=1e-12)
    results = {engine: simulate(net, plans["layout_levels"], config, SimOptions(engine=engine))
               for engine in ("des", "analytic")}
    for result in results.values():
        assert result.traffic_bytes == pytest.approx(plans["layout"].traffic_bytes, rel=1e-12)
        assert sum(a.sent_bytes for a in result.per_accelerator) == \
            pytest.approx(sum(a.received_bytes for a in result.per_accelerator), rel=1e-12)
    gap = results["analytic"].latency_cycles / results["des"].latency_cycles - 1
    assert abs(gap) < (0.001 if strategy == "data" else 0.1)
    assert results["des"].events < simulate(net, plans["layout"], config).events


def test_cli_runs_the_levels_model_and_lists_it(cli):
    """`run --traffic-model layout_levels` end to end on a 3 x 2 x 2 array, both engines;
    `--help` names the model; a misspelt model is refused with the allowed ones."""
    for engine in ("des", "analytic"):
        done = cli("run", "cifar_c", "--accelerators", "12", "--batch", "96", "--engine", engine,
                   "--traffic-model", "layout_levels")
        assert done.returncode == 0, done.stderr
        assert "step latency" in done.stdout
    assert "layout_levels" in cli("run", "--help").stdout
    wrong = cli("run", "cifar_c", "--traffic-model", "levels")
    assert wrong.returncode == 2 and "layout_levels" in wrong.stderr
    assert "Traceback" not in wrong.stderr


@settings(max_examples=60, deadline=None)
@given(members=st.integers(1, 12), cells=st.integers(0, 40),
       density=st.sampled_from([0.05, 0.3, 1.0]), seed=st.integers(0, 2**32 - 1))
def test_member_products_sparse_and_dense_agree(members, cells, density, seed):
    """`redistribute.member_products` (nonzero pairs cell by cell where sparse, one dense
    product where not) equals left @ right.T for any arrays."""
    rng = np.random.default_rng(seed)
    left = (rng.random((members, cells)) < density) * rng.integers(1, 9, (members, cells)) / 3
    right = rng.random((members, cells)) < density
    assert member_products(left, right).dense() == pytest.approx(
        left @ right.T.astype(float), rel=1e-12, abs=1e-12)
