"""The same training step in closed form, for quick sweeps: no events, no queues.

The task list is walked in order for all members at once (each has its own
compute times).
A computation takes each member's piece's cycles. A communication step takes as
long as the slowest of its messages alone in the array (its chunks cut
through DRAM, links and DRAM, plus the route latency; a collective's round r
message r + 1 times that, the rounds following each other), or as long as its
busiest link, or its busiest cube's DRAM, needs for all the step's bytes,
whichever is longer (`hardware.transfer.step_cycles`): its time alone. A
step starts when the last of its senders reaches it. Steps in flight at once
that share a link share it two ways (processor sharing, as the event-driven
engine's chunks take turns on a lane): each is later by the time the two
would have overlapped; steps on other links go on side by side. A wait ends
when its step has arrived; members that receive nothing in a step do not wait
for it. Contention beyond that (several groups' steps at once on the upper
links of a large array; a step that keeps its pace where the event-driven
engine lets it) is not modelled: `tests/test_engines_agree.py` says where the
two engines agree within 2% and where they do not.
"""

from __future__ import annotations

import time
from collections import defaultdict

import numpy as np

from hypar_sim.hardware.topology import Topology
from hypar_sim.hardware.transfer import Routed, step_cycles
from hypar_sim.results import SimResult
from hypar_sim.sim.accounting import assemble_result
from hypar_sim.sim.defaults import DEFAULT_CHUNK_BYTES, DEFAULT_MAX_CHUNKS
from hypar_sim.sim.schedule import Compute, Parallel, Schedule, Send, StepKey, Wait


def simulate_analytic(schedule: Schedule, topology: Topology,
                      chunk_bytes: float = DEFAULT_CHUNK_BYTES,
                      max_chunks: int = DEFAULT_MAX_CHUNKS, config_dict=None) -> SimResult:
    """Estimate one training step without simulation."""
    started = time.perf_counter()
    members = schedule.accelerators
    now = np.zeros(members)
    arrival: dict[StepKey, float] = {}
    flowing: list[tuple[StepKey, np.ndarray, float]] = []  # in flight: links, start
    waits: dict[int, float] = defaultdict(float)
    flat = schedule.flat
    routed = Routed.of(flat.src, flat.dst, topology)  # every step's, for the result as well
    ends = np.searchsorted(flat.step, np.arange(len(schedule.steps) + 1)).tolist()
    parts = {key: routed.part(ends[i], ends[i + 1]) for i, key in enumerate(schedule.steps)}
    senders = {key: np.unique(flat.src[ends[i]:ends[i + 1]])
               for i, key in enumerate(schedule.steps)}
    receivers = {key: np.unique(flat.dst[ends[i]:ends[i + 1]])
                 for i, key in enumerate(schedule.steps)}
    computations = iter(schedule.compute_cycles)
    for task in schedule.tasks:
        if isinstance(task, Compute | Parallel):
            now += next(computations)
        elif isinstance(task, Send):
            start = float(now[senders[task.step]].max(initial=0.0))
            alone = step_cycles(schedule.steps[task.step], topology, schedule.config,
                                chunk_bytes, max_chunks, parts[task.step])
            part = parts[task.step]
            links = part.loads(np.ones(len(part.shapes)), len(topology.links)) > 0
            earliest = float(now.min())  # no step starts before it
            flowing = [item for item in flowing if arrival[item[0]] > earliest]
            later = 0.0
            for key, used, began in flowing:  # sharing links with it: both slower
                overlap = min(arrival[key], start + alone) - max(began, start)
                if overlap > 0 and np.any(used & links):
                    later = max(later, overlap)
                    arrival[key] += overlap
            arrival[task.step] = start + alone + later
            flowing.append((task.step, links, start))
        elif isinstance(task, Wait):
            used = receivers[task.step]
            late = np.maximum(arrival[task.step] - now[used], 0.0)
            waits[task.step[0]] += float(late.sum()) / members  # mean over members
            now[used] = np.maximum(now[used], arrival[task.step])
    now = float(now.max())
    return assemble_result(schedule, topology, "analytic", now, waits, None, 0,
                           time.perf_counter() - started, config_dict, routed)
