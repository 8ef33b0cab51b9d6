"""Collectives by group (issue "Scale", item 1): a uniform all-to-all among k members is kept
as its group from the redistribution to the engines (`moved.Block`, rows with
`repeats`), never k (k - 1) pairs, and means exactly what its pairs meant."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hypar_sim.hardware.config import load_hardware
from hypar_sim.hardware.topology import make_topology
from hypar_sim.hardware.transfer import step_cycles
from hypar_sim.partition import redistribute as redistribute_module
from hypar_sim.partition.collectives import COLLECTIVES
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.partition.moved import Block, Moved
from hypar_sim.partition.redistribute import Cover, gather_stage, redistribute
from hypar_sim.partition.steps import TransferKind
from hypar_sim.planner.plan_messages import sent


def _regions(rng: np.random.Generator, members: int, extent: int) -> list[tuple]:
    """Each member a random interval of a 1-d tensor, some the whole of it."""
    regions = []
    for _ in range(members):
        if rng.random() < 0.5:
            regions.append((((0, extent),),))
        else:
            low = int(rng.integers(0, extent))
            regions.append((((low, int(rng.integers(low + 1, extent + 1))),),))
    return regions


@settings(max_examples=60, deadline=None)
@given(members=st.integers(3, 9), extent=st.integers(1, 12), seed=st.integers(0, 2**32 - 1))
def test_blocks_mean_what_their_pairs_meant(members, extent, seed):
    """Both stages of a redistribution with blocks, written out, equal the same stages
    computed pair by pair (no cell kept as a block), for random regions."""
    rng = np.random.default_rng(seed)
    contributions, needs = _regions(rng, members, extent), _regions(rng, members, extent)
    grouped = redistribute((extent,), contributions, needs)
    original = redistribute_module._uniform_cells
    try:
        redistribute_module._uniform_cells = lambda left, right: ((), left, right)
        paired = redistribute((extent,), contributions, needs)
    finally:
        redistribute_module._uniform_cells = original
    for stage in ("reduce", "gather"):
        mine, theirs = getattr(grouped, stage), getattr(paired, stage)
        assert not theirs.blocks
        assert mine.entries().dense() == pytest.approx(theirs.dense(), rel=1e-12, abs=1e-12)
        assert len(mine.entries().src) == len(theirs.src)
        assert mine.sum() == pytest.approx(theirs.sum(), rel=1e-12)


def test_a_gradient_all_reduce_among_1024_members_is_one_block():
    """Every member holds the whole gradient: the reduce-scatter and the all-gather are each
    one block of 1,024 members (1,047,552 entries written out, none kept), and the ring
    sends it as 1,024 rows of 1,023 rounds."""
    whole = [(((0, 4096),),)] * 1024
    stages = redistribute((4096,), whole, whole)
    for moved in (stages.reduce, stages.gather):
        assert len(moved.src) == 0 and len(moved.blocks) == 1
        assert len(moved.blocks[0].members) == 1024 and moved.blocks[0].amount == 4.0
        assert moved.blocks[0].entries == 1024 * 1023 and moved.sum() == 4.0 * 1024 * 1023
    ring = COLLECTIVES["ring"](stages.reduce, Hierarchy.binary(10), True)
    assert len(ring) == 1024 and set(ring.repeats.tolist()) == {1023}
    assert ring.dst.tolist() == [*range(1, 1024), 0]
    assert float(ring.sent_bytes.sum()) == 4.0 * 1024 * 1023


@pytest.mark.parametrize("collective", ["ring", "levels"])
@pytest.mark.parametrize(("sizes", "topology"), [((2, 2, 2, 2), "htree"), ((2, 3, 2), "torus"),
                                                 ((4, 4), "htree")])
def test_rows_with_repeats_time_as_their_rounds_written_out(collective, sizes, topology):
    """The analytic step time of a ring (or level stages) from its rows with repeats equals
    the time of the same messages a row each, round by round (blocks of the two halves of
    the array side by side, of other bytes)."""
    hierarchy = Hierarchy(sizes)
    k = hierarchy.members
    first = [(((0, 2 * k),),) if m < k // 2 else () for m in range(k)]
    second = [(((0, 2 * k),),) if m >= k // 2 else () for m in range(k)]
    moved = (redistribute((2 * k,), first, first).reduce * 3.0
             + redistribute((2 * k,), second, second).reduce * 5.0)
    assert len(moved.blocks) == 2
    config = load_hardware()
    network = make_topology(topology, config, hierarchy)
    steps = sent({(0, TransferKind.GRADIENT): moved}, (), collective, hierarchy)
    messages = steps[(0, TransferKind.GRADIENT)].messages(0, TransferKind.GRADIENT, hierarchy)
    written = messages.expanded()
    assert messages.messages == len(written)
    assert len(messages) < len(written) or collective == "levels"
    assert step_cycles(messages, network, config, 4096, 64) == \
        step_cycles(written, network, config, 4096, 64)
    sent_by = np.bincount(written.src, written.bytes, minlength=k)
    assert sent_by == pytest.approx(np.bincount(messages.src, messages.sent_bytes, minlength=k))
    half = k // 2
    expected = np.full(k, (half - 1) * 20.0)  # 2k elements over k/2 members: 4 a pair
    expected[:half] = (half - 1) * 12.0
    assert sent_by == pytest.approx(expected)


def test_overlapping_groups_each_run_their_own_ring():
    """A fused bucket of a gradient reduced over all members and one reduced over half of
    them: each group's ring on its own (as a framework runs one all-reduce per process
    group), k - 1 rounds of the whole and k/2 - 1 of the half, never the pairs written out."""
    k = 8
    whole = [(((0, 8),),)] * k
    half = [(((0, 4),),) if m < 4 else () for m in range(k)]
    both = redistribute((8,), whole, whole).reduce + redistribute((4,), half, half).reduce
    assert len(both.blocks) == 2
    transfers = COLLECTIVES["ring"](both, Hierarchy((2, 2, 2)), True)
    assert sorted(transfers.repeats.tolist()) == [3] * 4 + [7] * 8
    assert float(transfers.sent_bytes.sum()) == pytest.approx(both.sum())
    ring_of_half = transfers.repeats == 3
    assert set(transfers.src[ring_of_half].tolist()) == {0, 1, 2, 3}


def test_a_block_that_shares_members_with_pairs_is_sent_beside_them():
    """Where other entries touch a block's members, the block is still its group's ring and
    the entries are sent directly beside it."""
    k = 6
    whole = [(((0, 6 * k),),)] * k
    moved = redistribute((6 * k,), whole, whole).reduce
    shifted = redistribute((6,), [(((0, 6),),), (((0, 6),),)] + [()] * (k - 2),
                           [()] * k)  # members 0 and 1 hold partial sums of another tensor
    extra = shifted.reduce
    assert len(extra.src) > 0 and not extra.blocks
    both = moved + extra
    transfers = COLLECTIVES["ring"](both, Hierarchy((k,)), True)
    assert sorted(transfers.repeats.tolist()) == [1] * len(extra.src) + [k - 1] * k
    assert float(transfers.sent_bytes.sum()) == pytest.approx(both.sum())


def test_gather_stage_keeps_uniform_cells_as_blocks():
    """`gather_stage` of a value every member holds a 1/k part of and every member needs."""
    k = 5
    holders = Cover.of(k, 1, np.arange(k), np.zeros(k, dtype=np.int64), np.full(k, 1 / k))
    need = Cover.of(k, 1, np.arange(k), np.zeros(k, dtype=np.int64))
    gathered = gather_stage(holders, need, np.array([10.0]))
    assert len(gathered.src) == 0 and len(gathered.blocks) == 1
    assert gathered.blocks[0].amount == pytest.approx(2.0)


def test_a_member_skips_the_stages_of_groups_it_is_not_in():
    """Level stages of two overlapping groups in one step (a 4 x 2 x 2 array, one group
    along levels 0 and 2, one along 1 and 2): members of one group send the step's first and
    third stage starts and none of the second; the event-driven engine still delivers every
    message, the same with and without symmetry."""
    from hypar_sim.sim.des import simulate_des
    from hypar_sim.sim.schedule import Schedule, Send, Units, Wait

    hierarchy = Hierarchy((4, 2, 2))
    members = np.arange(16)
    first = members[(members // hierarchy.strides[1]) % 2 == 0]
    second = members[(members // hierarchy.strides[0]) % 4 == 0]
    moved = Moved(16, np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0),
                  (Block(first, 1e5), Block(second, 1e5)))
    key = (0, TransferKind.GRADIENT_GATHER)
    steps = {key: COLLECTIVES["levels"](moved, hierarchy, False).messages(0, key[1], hierarchy)}
    units = Units("x", "x", 1, hierarchy, ("n",), (("x",),) * 3, "layout_levels")
    schedule = Schedule(units, load_hardware(), (Send(key), Wait(key)), steps)
    sent = schedule.sent_flat()
    alone = int(np.setdiff1d(first, second)[0])
    assert sorted(set(sent.round[sent.src == alone].tolist())) == [0, 2]
    topology = make_topology("htree", load_hardware(), hierarchy)
    latencies = {simulate_des(schedule, topology, symmetry=symmetric).latency_cycles
                 for symmetric in (True, False)}
    assert len(latencies) == 1 and latencies.pop() > 0


def test_every_level_ring_is_its_own_collective():
    """Under `levels` a collective over 4 x 4 members runs a stage per level, each a ring per
    level group: eight rings of four, each numbered on its own (`Transfers.group`), so the
    event-driven engine releases each ring's parts when that ring ends, not when all do."""
    hierarchy = Hierarchy((4, 4))
    moved = Moved(16, np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0),
                  (Block(np.arange(16), 1e5),))
    transfers = COLLECTIVES["levels"](moved, hierarchy, True)
    rings = {group: sorted(transfers.src[transfers.group == group].tolist())
             for group in np.unique(transfers.group).tolist()}
    assert len(rings) == 8 and all(len(members) == 4 for members in rings.values())
    assert sorted(map(tuple, rings.values())) == sorted(
        [tuple(range(4 * i, 4 * i + 4)) for i in range(4)] + [tuple(range(i, 16, 4))
                                                           for i in range(4)])


def _boxes_2d(rng: np.random.Generator, members: int, extents: tuple[int, int]) -> list[tuple]:
    """Each member one or two disjoint boxes of a 2-d tensor (cut from one box along its
    rows), some the whole of it, some nothing."""
    regions = []
    for _ in range(members):
        pick = rng.random()
        if pick < 0.1:
            regions.append(())
            continue
        if pick < 0.4:
            regions.append((((0, extents[0]), (0, extents[1])),))
            continue
        lo = [int(rng.integers(0, e)) for e in extents]
        hi = [int(rng.integers(a + 1, e + 1)) for a, e in zip(lo, extents, strict=True)]
        if hi[0] - lo[0] > 1 and rng.random() < 0.5:
            cut = int(rng.integers(lo[0] + 1, hi[0]))
            regions.append((((lo[0], cut), (lo[1], hi[1])), ((cut, hi[0]), (lo[1], hi[1]))))
        else:
            regions.append((((lo[0], hi[0]), (lo[1], hi[1])),))
    return regions


@settings(max_examples=150, deadline=None)
@given(members=st.integers(1, 9), rows=st.integers(1, 7), cols=st.integers(1, 5),
       copies=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_stage_totals_equal_the_sums_of_the_stages_matrices(members, rows, cols, copies, seed):
    """`totals_both_ways` (each stage's elements in closed form, cell by cell) equals the
    sums of `redistribute_both_ways`' matrices, for random regions of a 2-d tensor (members
    holding nothing, the whole, or two boxes) with and without replica classes; and
    `all_reduce_totals` those of an all-reduce's and of a loss's."""
    rng = np.random.default_rng(seed)
    made, read = _boxes_2d(rng, members, (rows, cols)), _boxes_2d(rng, members, (rows, cols))
    replicas = [rng.integers(0, max(1, members // 2), members) if copies else None
                for _ in range(2)]
    matrices = redistribute_module.redistribute_both_ways((rows, cols), made, read, *replicas)
    totals = redistribute_module.totals_both_ways((rows, cols), made, read, *replicas)
    for stages, (reduced, gathered) in zip(matrices, totals, strict=True):
        assert reduced == pytest.approx(stages.reduce.sum(), rel=1e-12, abs=1e-12)
        assert gathered == pytest.approx(stages.gather.sum(), rel=1e-12, abs=1e-12)
    # an all-reduce, and a loss (no needs; its error back to every contributor), the same
    reduced, gathered = redistribute_module.all_reduce_totals((rows, cols), made, replicas[0])
    everyone = redistribute_module.redistribute((rows, cols), made, made, replicas[0])
    loss = redistribute_module.redistribute((rows, cols), made, None, replicas[0])
    for stages, back in ((everyone, everyone.gather), (loss, loss.returned())):
        assert reduced == pytest.approx(stages.reduce.sum(), rel=1e-12, abs=1e-12)
        assert gathered == pytest.approx(back.sum(), rel=1e-12, abs=1e-12)
