"""The event-driven engine's run: the schedule's messages routed and in classes, or past
`--des-messages` in group operations, guarded against memory it would not have, simulated
(`sim.engine.StepEngine`), and its classes expanded to every accelerator and link."""

from __future__ import annotations

import dataclasses
import math
import time
from itertools import chain

import numpy as np

from hypar_sim.hardware.topology import Topology
from hypar_sim.hardware.transfer import Routed
from hypar_sim.resources import check_memory
from hypar_sim.results import SimResult
from hypar_sim.sim.accounting import assemble_result
from hypar_sim.sim.defaults import DEFAULT_CHUNK_BYTES, DEFAULT_DES_MESSAGES, DEFAULT_MAX_CHUNKS
from hypar_sim.sim.engine import StepEngine
from hypar_sim.sim.operations import Running, build_operations, grouped_steps, kept_by
from hypar_sim.sim.schedule import Schedule
from hypar_sim.sim.symmetry import alike_classes, classify
from hypar_sim.sim.trace import summary_events, trace_events

#: Bytes the engine holds per message of the schedule: routing and classifying them (each
#: message's links, and its images under every symmetry tried; measured: a GPT-3-shaped graph
#: at batch 64 on 1,024 accelerators, 15,486,624 messages, its process killed at 20.5 GB in
#: `classify` against 1.4 GB for planning: more than 1.2 KB a message), then simulating one
#: of each class (its `Sent`, its state in flight, its events; measured: vgg_a at batch 4096
#: on 256 accelerators, 327,328 messages simulated one by one, 602 MB against 157 MB for the
#: analytic engine: about 1.4 KB).
DES_MESSAGE_BYTES = 2500
#: Bytes per message of a group operation (`sim.operations`): its route, for the bytes on
#: every link (the analytic engine's measure: gpt2_xl at batch 256 on 256 accelerators,
#: 197,120 messages, 0.16 GB in all).
OPERATION_ROW_BYTES = 400


def simulate_des(schedule: Schedule, topology: Topology,
                 chunk_bytes: float = DEFAULT_CHUNK_BYTES, max_chunks: int = DEFAULT_MAX_CHUNKS,
                 config_dict=None, trace: bool = False, progress: bool = False,
                 symmetry: bool = True, trace_links: str = "messages",
                 des_messages: int | None = DEFAULT_DES_MESSAGES) -> SimResult:
    """Simulate one training step event by event, one accelerator of each symmetry class
    (`sim.symmetry`; every one with `symmetry` False or a trace of every message); the
    result reports every accelerator and link, expanded from the classes. With `trace`,
    the result carries its trace events (`sim.trace`): every message on every link, or
    with `trace_links` "summary" a counter per class of links (symmetry kept); with
    `progress`, a bar on stderr for runs over 2 s. Where more than `des_messages` messages
    (None: no limit; a trace of every message has none) would be simulated one by one (one
    of each symmetry class), every communication step runs as a group operation instead
    (`sim.operations`, `grouped`); so with `symmetry` False or not."""
    summary = trace_links == "summary"
    every = trace and not summary  # a trace of every message: no classes, no operations
    started = time.perf_counter()
    flat = schedule.sent_flat()  # a ring's rounds from one member as one message
    budget = None if every else des_messages
    grouped = grouped_steps(len(flat.src), budget)
    # an operation holds a float per link and two per member, twice (its own and what a
    # class must keep: `kept_by`)
    held = len(schedule.steps) * (len(topology.links) + 2 * schedule.accelerators) * 16.0
    check_memory(len(flat.src) * (OPERATION_ROW_BYTES if grouped else DES_MESSAGE_BYTES)
                 + (held if grouped is not False else 0.0),
                 f"the event-driven engine's {len(flat.src):,} messages ("
                 + ("routed, in group operations)" if grouped else
                    "routed, classified and simulated)"),
                 "use --engine analytic, a smaller --des-messages, fewer accelerators or a "
                 "smaller batch")
    routed = Routed.of(flat.src, flat.dst, topology)  # for the classes or the operations
    classes = None
    if grouped is None:  # as many message classes as the budget? (the same with symmetry)
        classes = classify(schedule, topology, True, routed, flat, most=budget)
        grouped = classes is None
    operations = []
    if grouped:  # no message on its own: members alike in all they do are a class
        operations = build_operations(schedule, flat, routed, topology, chunk_bytes,
                                      max_chunks)
        classes = alike_classes(schedule, topology, kept_by(operations), symmetry)
    elif classes is None or not symmetry or every:
        classes = classify(schedule, topology, symmetry and not every, routed, flat)
    state = StepEngine(schedule, topology, classes, Running(operations, classes), chunk_bytes,
                  max_chunks, trace, progress, summary)
    latency, events = state.run()
    unfinished = [key for key, count in state.pending.items() if count]
    if unfinished:
        raise RuntimeError("simulation ended with steps not delivered to every receiver: "
                           f"{unfinished[:3]}")
    sizes = np.bincount(classes.member_class, minlength=len(classes.members)).tolist()
    layers = sorted({layer for waits in state.wait_cycles for layer in waits})
    # every member's wait, added up exactly: the same float whatever the classes
    waits = {layer: math.fsum(chain.from_iterable(
        [waits.get(layer, 0.0)] * size for waits, size in zip(state.wait_cycles, sizes,
                                                               strict=True)))
             / schedule.accelerators for layer in layers}
    busy = [state.links[link_class].busy_cycles / link.lanes
            for link_class, link in zip(classes.link_class.tolist(), topology.links, strict=True)]
    link_sizes = np.bincount(classes.link_class, minlength=len(classes.links)).tolist()
    grants = sum(lanes.grants * size for lanes, size in (*zip(state.links, link_sizes, strict=True),
                                                         *zip(state.vaults, sizes, strict=True)))
    result = assemble_result(schedule, topology, "des", latency, waits, busy, events,
                             time.perf_counter() - started, config_dict, routed,
                             max(state.passes_end, default=0.0))
    stage_wait = math.fsum(wait * size for wait, size in zip(state.stage_waits, sizes,
                                                             strict=True))
    if state.counters is not None:
        traced = tuple(summary_events(schedule, topology, classes.link_class, classes.links,
                                      classes.member_class, state.computations, state.counters,
                                      schedule.config.clock_hz))
    else:
        traced = tuple(trace_events(schedule, topology, state.computations, state.spans,
                                    schedule.config.clock_hz)) if trace else ()
    return dataclasses.replace(result, lane_grants=grants, trace_events=traced,
                               group_operations=len(operations),
                               stage_wait_cycles=stage_wait / schedule.accelerators)
