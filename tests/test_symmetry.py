"""Exact symmetry classes (issue "Scale to thousands of accelerators"): the event-driven
engine simulating one accelerator per class gives the full simulation's result to the last
byte and cycle."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from hypar_sim.cli import main
from hypar_sim.hardware.config import load_hardware
from hypar_sim.hardware.topology import make_topology
from hypar_sim.partition.hierarchy import Hierarchy
from hypar_sim.planner.options import PlanOptions
from hypar_sim.planner.plan import make_plan
from hypar_sim.sim.des import simulate_des
from hypar_sim.sim.lanes import Lanes
from hypar_sim.sim.schedule import build_schedule
from hypar_sim.sim.symmetry import classify, orbit_labels
from hypar_sim.workload.network import load_network


def _schedule(strategy: str, count: int, batch: int, model: str = "paper",
              hierarchy: Hierarchy | None = None, network: str = "vgg_a"):
    config = load_hardware()
    net = load_network(network)
    plan = make_plan(net, strategy, hierarchy or Hierarchy.for_count(count), batch,
                     options=PlanOptions(traffic_model=model), config=config)
    return build_schedule(net, plan, config), plan, config


def _both(schedule, topology):
    """(classes, symmetric result, full result), run-time fields cleared."""
    def bare(result):
        return dataclasses.replace(result, events=0, wall_s=0.0)
    return (classify(schedule, topology),  # every message on its own (no budget)
            bare(simulate_des(schedule, topology, des_messages=None)),
            bare(simulate_des(schedule, topology, symmetry=False, des_messages=None)))


CASES = [pytest.param(strategy, topology, count,
                      marks=[pytest.mark.slow] if count == 256 else [])  # 256: a minute in all
         for count in (16, 64, 256)
         for topology in ("htree", "torus", "ideal") for strategy in ("data", "model", "hypar")]


@pytest.mark.parametrize(("strategy", "topology", "count"), CASES)
def test_symmetric_run_equals_the_full_simulation(strategy, topology, count):
    schedule, plan, config = _schedule(strategy, count, 256)
    classes, reduced, full = _both(schedule, make_topology(topology, config, plan.hierarchy))
    assert reduced == full  # every field: latency, waits, energy, per link, per accelerator
    assert reduced.latency_cycles > 0
    if topology != "torus":  # a fat tree and an ideal array: one class of accelerators
        assert len(classes.members) == 1


@pytest.mark.parametrize(("count", "batch", "sizes", "topology", "model"), [
    (16, 250, None, "htree", "layout"),  # uneven samples: classes split
    (12, 100, (3, 2, 2), "htree", "layout"),  # a 3-way level, uneven
    (12, 96, (3, 2, 2), "torus", "layout"),
    (16, 256, None, "htree", "layout"),  # ring collectives: few symmetries
    (8, 64, None, "torus", "layout_levels"),
])
def test_uneven_shares_and_other_arrays_stay_exact(count, batch, sizes, topology, model):
    hierarchy = Hierarchy(sizes) if sizes else None
    schedule, plan, config = _schedule("hypar", count, batch, model, hierarchy)
    classes, reduced, full = _both(schedule, make_topology(topology, config, plan.hierarchy))
    assert reduced == full
    if batch % count:  # members with another share are in another class
        cycles = {tuple(task.costs[m].cycles for task in schedule.computes)
                  for m in range(count)}
        assert len(classes.members) >= len(cycles) > 1


@pytest.mark.parametrize(("count", "batch", "model", "topology", "classes_of"), [
    (64, 256, "paper", "htree", 1),  # one class: one accelerator simulated for 64
    (64, 256, "layout_levels", "htree", 4),  # real layouts split the classes
    (16, 250, "layout", "torus", 16),  # uneven shares: every accelerator its own class
])
def test_bytes_sent_equal_received_equal_planner_traffic_in_a_reduced_run(
        count, batch, model, topology, classes_of):
    schedule, plan, config = _schedule("hypar", count, batch, model)
    topology = make_topology(topology, config, plan.hierarchy)
    assert len(classify(schedule, topology).members) == classes_of
    result = simulate_des(schedule, topology)
    sent = sum(a.sent_bytes for a in result.per_accelerator)
    received = sum(a.received_bytes for a in result.per_accelerator)
    assert len(result.per_accelerator) == count and len(result.per_link) == len(topology.links)
    assert sent == received == result.traffic_bytes == plan.traffic_bytes > 0


def test_equal_requests_of_a_cycle_share_the_lanes_and_finish_together():
    one = Lanes(1)
    assert one.serve(0.0, 2.0, 0.0, 3) == (0.0, 6.0, 6.0)  # three equal requests, one lane
    assert one.serve(1.0, 1.0, 0.0) == (6.0, 7.0, 7.0)  # the next waits for them
    assert one.grants == 4 and one.busy_cycles == 7.0
    four = Lanes(4)
    four.free = [0.0, 0.0, 5.0, 5.0]
    assert four.serve(0.0, 2.0, 0.0, 2) == (0.0, 2.0, 2.0)  # the two free lanes
    assert four.serve(0.0, 2.0, 0.0, 2) == (2.0, 4.0, 4.0)  # the same two, once free again
    assert sorted(four.free) == [4.0, 4.0, 5.0, 5.0]
    assert four.serve(8.0, 2.0, 0.0, 8) == (8.0, 12.0, 12.0)  # eight on four lanes: twice as long
    # a chunk cannot finish before it has arrived from upstream (20), but its lane is free
    # again once it has been sent (13): the wait for upstream holds no lane
    assert four.serve(12.0, 1.0, 20.0) == (12.0, 20.0, 13.0)
    assert sorted(four.free) == [12.0, 12.0, 12.0, 13.0]


def test_a_cycles_requests_go_smaller_first_whatever_their_order():
    finishes = []
    for order in ((3.0, 1.0), (1.0, 3.0)):
        lanes = Lanes(1)
        for service in order:
            lanes.requests.append((service, 0.0, 1, None, service, 0))
        finishes.append(sorted((r[0], f) for r, _, f, _ in lanes.grant(0.0)))
    assert finishes[0] == finishes[1] == [(1.0, 1.0), (3.0, 4.0)]


def test_orbit_labels_name_each_orbit_by_its_lowest_element():
    shift = np.array([1, 2, 0, 3, 5, 4])  # a 3-cycle, a fixed point, a swap
    assert orbit_labels(6, [shift]).tolist() == [0, 0, 0, 3, 4, 4]
    assert orbit_labels(4, []).tolist() == [0, 1, 2, 3]


def test_hierarchy_translations_move_one_coordinate():
    moved = Hierarchy((3, 2)).translations()
    assert [m.tolist() for m in moved] == [[2, 3, 4, 5, 0, 1], [1, 0, 3, 2, 5, 4]]


def test_no_symmetry_flag_gives_the_same_json(capsys):
    outputs = []
    for flags in ([], ["--no-symmetry"]):
        assert main(["run", "vgg_a", "--accelerators", "16", "--json", *flags]) == 0
        data = json.loads(capsys.readouterr().out)
        for key in ("events", "wall_s"):
            data.pop(key, None)
        outputs.append(data)
    assert outputs[0] == outputs[1]


@pytest.mark.parametrize("order", ["images apart", "images between"])
def test_rings_sharing_an_edge_keep_their_own_groups(order):
    """Rings of {0, 1, 2} and {0, 1, 4} share the edge 0 -> 1 with equal bytes, as do their
    images under the top level's translation: a symmetry must map each ring onto its own
    image, whatever order the collectives are numbered in, so that each ring's members wait
    for their own ring (`Sent.group`) and symmetric and full runs agree to the cycle."""
    from hypar_sim.partition.collectives import COLLECTIVES
    from hypar_sim.partition.moved import Block, Moved
    from hypar_sim.partition.steps import TransferKind
    from hypar_sim.sim.schedule import Schedule, Send, Units, Wait

    hierarchy = Hierarchy((2, 2, 2))
    first, second = np.array([0, 1, 2]), np.array([0, 1, 4])
    blocks = [first, second, (first + 4) % 8, np.sort((second + 4) % 8)]
    if order == "images between":
        blocks = [blocks[0], blocks[3], blocks[1], blocks[2]]
    moved = Moved(8, np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0),
                  tuple(Block(np.sort(b), 1e6) for b in blocks))
    gather, other = (0, TransferKind.GRADIENT_GATHER), (1, TransferKind.GRADIENT_GATHER)
    lone = Moved(8, np.array([2, 6]), np.array([3, 7]), np.array([4e6, 4e6]))
    steps = {gather: COLLECTIVES["ring"](moved, hierarchy, False).messages(*gather, hierarchy),
             other: COLLECTIVES["ring"](lone, hierarchy, False).messages(*other, hierarchy)}
    units = Units("x", "x", 1, hierarchy, ("n",), (("x",),) * 3, "layout")
    schedule = Schedule(units, load_hardware(), (Send(gather), Wait(gather), Send(other),
                                                 Wait(other)), steps)
    topology = make_topology("htree", load_hardware(), hierarchy)
    classes = classify(schedule, topology)
    rings = {(sent.message.src, sent.message.dst, sent.group)
             for sends in classes.outbox.values() for sent in sends if sent.rounds > 1}
    assert len({group for _, _, group in rings}) > 1
    assert simulate_des(schedule, topology).latency_cycles == \
        simulate_des(schedule, topology, symmetry=False).latency_cycles
