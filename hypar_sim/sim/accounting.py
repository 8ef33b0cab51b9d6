"""What both engines count the same way: traffic, energy, results (message timing alone in
the array is `hardware.transfer`'s)."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence

import numpy as np

from hypar_sim import __version__
from hypar_sim.hardware.config import HardwareConfig
from hypar_sim.hardware.costs import PieceCost
from hypar_sim.hardware.energy import Action, EnergyTable, add_counts, scale_counts
from hypar_sim.hardware.topology import Topology
from hypar_sim.hardware.transfer import Routed
from hypar_sim.partition.steps import Phase
from hypar_sim.results import AcceleratorResult, LayerResult, LinkResult, SimResult
from hypar_sim.sim.schedule import Compute, Parallel, Schedule, task_cycles


def _running_total(values: np.ndarray) -> float:
    """The sum added up one value after another, as a loop over the messages would."""
    return float(np.cumsum(values)[-1]) if len(values) else 0.0


def communication_counts(schedule: Schedule, topology: Topology, config: HardwareConfig,
                         routed: Routed | None = None) -> dict[Action, float]:
    """Energy actions of all messages: DRAM words at both ends, link and switch bits (a link
    of a topology file's level may cost more or less per bit than the table's); `routed`:
    the messages' routes, if already known."""
    flat = schedule.flat
    routed = routed or Routed.of(flat.src, flat.dst, topology)
    sent_bytes = flat.sent_bytes
    bits = sent_bytes * (8 / config.packet_efficiency)  # packet headers ride along
    return {Action.DRAM: _running_total(2 * sent_bytes / config.word_bytes),
            Action.LINK_BIT: _running_total(bits * routed.energy_links),
            Action.SWITCH_BIT: _running_total(bits * routed.switches)}


def _distinct(task: Compute) -> list[tuple[PieceCost, int]]:
    """The task's distinct costs and how many members have each (members with equal
    shares share one cost object)."""
    ids = list(map(id, task.costs))
    objects = dict(zip(ids, task.costs, strict=True))
    return [(objects[key], count) for key, count in Counter(ids).items()]  # first seen first


def _compute_and_stall(schedule: Schedule) -> tuple[float, float]:
    """Cycles a cube computes and waits on DRAM, means over the members: computations that
    run side by side (`Parallel`) take as long as their longest, which alone counts (the
    shares of a step add up to one)."""
    compute = stall = 0.0
    for task in schedule.tasks:
        if isinstance(task, Compute):
            for cost, count in _distinct(task):
                compute += cost.compute_cycles * count
                stall += cost.stall_cycles * count
        elif isinstance(task, Parallel):
            for member in range(schedule.accelerators):
                longest = max((c.costs[member] for c in task.computes), key=lambda c: c.cycles)
                compute += longest.compute_cycles
                stall += longest.stall_cycles
    return compute / schedule.accelerators, stall / schedule.accelerators


def compute_counts(schedule: Schedule) -> dict[Action, float]:
    """Energy actions of all computation on all accelerators."""
    return add_counts(*(scale_counts(cost.counts, count)
                        for task in schedule.computes
                        for cost, count in _distinct(task)))


def phase_cycles(schedule: Schedule) -> dict[tuple[int, Phase], float]:
    """Compute time of each (layer, phase) on its slowest member, cycles (summed over a
    pipeline's micro-batches)."""
    cycles: dict[tuple[int, Phase], float] = defaultdict(float)
    for task in schedule.computes:
        cycles[(task.layer, task.phase)] += max(cost.cycles for cost in task.costs)
    return dict(cycles)


def _cost_classes(computes: Sequence[Compute], members: int) -> list[bytes]:
    """Each member's key: equal for members whose every computation is the same cost
    object. A repeated block's computations share their tuple of costs, so each distinct
    tuple is read once: a member's label in it (which of its distinct objects is the
    member's), the labels of every distinct tuple side by side."""
    labels = []
    for costs in {id(task.costs): task.costs for task in computes}.values():
        index: dict[int, int] = {}
        labels.append([index.setdefault(id(cost), len(index)) for cost in costs])
    table = np.array(labels, dtype=np.int64).reshape(len(labels), members)
    return [table[:, member].tobytes() for member in range(members)]


def per_accelerator(schedule: Schedule, config: HardwareConfig) -> tuple[AcceleratorResult, ...]:
    """Every member's busy time, bytes sent and received, and energy (its computations and
    its messages' DRAM accesses; links, switches and static power are the array's)."""
    members = schedule.accelerators
    tasks = [task for task in schedule.tasks if isinstance(task, Compute | Parallel)]
    computes = schedule.computes
    # members whose every computation is the same cost object are busy as long and count
    # the same actions: each is added up once (in the same order, so the same floats)
    alike: dict[bytes, tuple[float, dict[Action, float]]] = {}
    own = []
    for member, key in enumerate(_cost_classes(computes, members)):
        if key not in alike:
            busy = 0.0
            for task in tasks:
                busy += task_cycles(task, member)
            alike[key] = busy, add_counts(*(task.costs[member].counts for task in computes))
        own.append(alike[key])
    flat = schedule.flat
    sent_bytes = flat.sent_bytes
    sent = np.bincount(flat.src, sent_bytes, minlength=members).tolist()
    received = np.bincount(flat.dst, sent_bytes, minlength=members).tolist()
    table = EnergyTable.from_config(config)
    return tuple(
        AcceleratorResult(member, busy, sent[member], received[member],
                          table.energy(add_counts(counts, {
                              Action.DRAM: (sent[member] + received[member]) / config.word_bytes
                          })).total_pj)
        for member, (busy, counts) in enumerate(own))


def assemble_result(
    schedule: Schedule,
    topology: Topology,
    engine: str,
    latency_cycles: float,
    comm_wait_per_layer: Mapping[int, float],
    link_busy_cycles: Sequence[float] | None,
    events: int,
    wall_s: float,
    config_dict: Mapping | None = None,
    routed: Routed | None = None,
    passes_cycles: float = 0.0,
) -> SimResult:
    """The SimResult of a finished step (comm waits are means over accelerators; links'
    busy cycles None: each link's bytes over its bandwidth, as the analytic engine has it;
    `passes_cycles`: when the last forward or backward computation ended, a pipeline's
    flush)."""
    config = schedule.config
    units = schedule.units
    flat = schedule.flat
    routed = routed or Routed.of(flat.src, flat.dst, topology)
    sent_bytes = flat.sent_bytes
    loads = routed.loads(sent_bytes, len(topology.links))
    carried = loads.tolist()
    if link_busy_cycles is None:
        link_busy_cycles = (loads / topology.link_bandwidths).tolist()
    counts = add_counts(compute_counts(schedule),
                        communication_counts(schedule, topology, config, routed))
    counts[Action.STATIC_PU_CYCLE] = config.pus_per_cube * schedule.accelerators * latency_cycles
    energy = EnergyTable.from_config(config).energy(counts)

    cycles = phase_cycles(schedule)
    busy = _compute_and_stall(schedule)
    by_layer = np.bincount(flat.layer, sent_bytes, minlength=len(units.names))
    _, first = np.unique(flat.layer, return_index=True)
    traffic = {int(flat.layer[i]): float(by_layer[flat.layer[i]]) for i in sorted(first)}
    traffic = defaultdict(float, traffic)  # layers in the order their first message comes
    per_level = np.bincount(flat.level, sent_bytes, minlength=units.hierarchy.levels).tolist()
    layers = tuple(
        LayerResult(
            name=name,
            forward_cycles=cycles.get((index, Phase.FORWARD), 0.0),
            backward_cycles=cycles.get((index, Phase.BACKWARD), 0.0),
            gradient_cycles=cycles.get((index, Phase.GRADIENT), 0.0),
            update_cycles=cycles.get((index, Phase.UPDATE), 0.0),
            comm_wait_cycles=comm_wait_per_layer.get(index, 0.0),
            traffic_bytes=traffic[index],
            recompute_cycles=cycles.get((index, Phase.RECOMPUTE), 0.0),
        )
        for index, name in enumerate(units.names)
    )
    links = tuple(
        LinkResult(link.name, carried[link.index],
                   link_busy_cycles[link.index] / latency_cycles if latency_cycles else 0.0)
        for link in topology.links
    )
    members = per_accelerator(schedule, config)
    return SimResult(
        network=units.network, strategy=units.strategy, topology=topology.name,
        engine=engine, accelerators=schedule.accelerators, batch=units.batch,
        plan=tuple(tuple(level) for level in units.kinds),
        clock_hz=config.clock_hz, latency_cycles=latency_cycles,
        energy_breakdown_pj={action.value: pj for action, pj in energy.parts_pj.items()},
        traffic_bytes=sum(traffic.values()),
        traffic_bytes_per_level=tuple(per_level),
        compute_cycles=busy[0], dram_stall_cycles=busy[1],
        comm_wait_cycles=sum(comm_wait_per_layer.values()),
        per_layer=layers, per_link=links, events=events, wall_s=wall_s,
        version=__version__, config=config_dict,
        per_accelerator=members, hierarchy=units.hierarchy.sizes,
        traffic_model=units.traffic_model, phases=units.phases,
        pipeline_idle_fraction=idle_fraction(schedule, passes_cycles),
    )


def is_update(task: Compute | Parallel) -> bool:
    """Whether a computation is a weight update (after a pipeline's flush)."""
    computes = task.computes if isinstance(task, Parallel) else (task,)
    return all(compute.phase is Phase.UPDATE for compute in computes)


def idle_fraction(schedule: Schedule, passes_cycles: float) -> float:
    """A pipeline's bubble: over its passes (from the step's start to the flush, when the
    last backward computation ends; the updates after it are not pipelined), the time each
    stage's members are not computing, summed over stages, over stages x that span (0
    without a pipeline)."""
    stages = len(schedule.stage_tasks)
    if stages <= 1 or passes_cycles <= 0:
        return 0.0
    passes = [not is_update(task) for task in schedule.tasks
              if isinstance(task, Compute | Parallel)]
    busy = schedule.compute_cycles[np.array(passes, dtype=bool)].sum(axis=0)
    per_stage = busy.reshape(stages, -1).mean(axis=1)
    return float((passes_cycles - per_stage).sum() / (stages * passes_cycles))
