"""A simulated step as a Chrome / Perfetto trace (open it in ui.perfetto.dev).

One track per accelerator (its computations: "layer phase", with the busiest
PU count and MACs as arguments; computations that run side by side on a
cube are one event named by all of them) and one per directed link (every
message's span on it, from its first chunk's start to its last chunk's end,
with its bytes, step and route ends as arguments). Times are microseconds of
the array clock. With `--trace-links summary` (`summary_events`), for large arrays: one
track per class of alike accelerators and one counter per class of alike links (GB/s on
one of them, in at most 256 bins): its size is bounded by the classes, not the messages.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from hypar_sim.hardware.topology import Topology
from hypar_sim.sim.schedule import Compute, Parallel, Schedule

_ACCELERATORS, _LINKS = 1, 2


def _name(schedule: Schedule, compute: Compute) -> str:
    return f"{schedule.units.names[compute.layer]} {compute.phase.value}"


def _computation_events(schedule: Schedule,
                        computations: Sequence[tuple[int, float, float, Compute | Parallel]],
                        us: float) -> list[dict[str, Any]]:
    events = []
    for member, start, end, task in computations:
        parts = task.computes if isinstance(task, Parallel) else (task,)
        events.append({
            "name": " + ".join(_name(schedule, c) for c in parts), "cat": "compute", "ph": "X",
            "pid": _ACCELERATORS, "tid": member, "ts": start * us, "dur": (end - start) * us,
            "args": {"cycles": end - start, "macs": sum(c.costs[member].macs for c in parts),
                     "pus": max(c.costs[member].pus_used for c in parts)}})
    return events


def trace_events(schedule: Schedule, topology: Topology,
                 computations: Sequence[tuple[int, float, float, Compute | Parallel]],
                 spans: dict, clock_hz: float) -> list[dict[str, Any]]:
    """Trace events (Chrome's JSON format) of one simulated step."""
    us = 1e6 / clock_hz
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": _ACCELERATORS,
         "args": {"name": "accelerators"}},
        {"name": "process_name", "ph": "M", "pid": _LINKS, "args": {"name": "links"}}]
    events += [{"name": "thread_name", "ph": "M", "pid": _ACCELERATORS, "tid": m,
                "args": {"name": f"accelerator {m}"}} for m in range(schedule.accelerators)]
    events += [{"name": "thread_name", "ph": "M", "pid": _LINKS, "tid": link.index,
                "args": {"name": link.name}} for link in topology.links]
    events += _computation_events(schedule, computations, us)
    for (_, link), (start, finish, size, message) in spans.items():
        events.append({
            "name": f"{schedule.units.names[message.layer]} {message.kind.value}",
            "cat": "link", "ph": "X", "pid": _LINKS, "tid": link, "ts": start * us,
            "dur": (finish - start) * us,
            "args": {"bytes": size, "src": message.src, "dst": message.dst,
                     "round": message.round}})
    return events


class LinkCounters:
    """Bytes on one link of each link class over the step, in `bins` equal bins from cycle
    0: the bin width doubles (neighbouring bins merged) whenever a chunk would end past the
    last, so the memory is bounded whatever the step's length (`--trace-links summary`)."""

    def __init__(self, classes: int, bins: int = 256, width_cycles: float = 1024.0) -> None:
        self.bytes = np.zeros((classes, bins))
        self.width_cycles = width_cycles

    def add(self, link_class: int, start: float, end: float, size: float) -> None:
        """`size` bytes on the link from cycle `start` to `end`, spread evenly over the bins
        they cross."""
        bins = self.bytes.shape[1]
        while end >= self.width_cycles * bins:
            merged = self.bytes.reshape(len(self.bytes), bins // 2, 2).sum(axis=2)
            self.bytes = np.concatenate([merged, np.zeros_like(merged)], axis=1)
            self.width_cycles *= 2
        width = self.width_cycles
        first, last = int(start // width), int(end // width)
        if first == last or end <= start:
            self.bytes[link_class, first] += size
            return
        for at in range(first, last + 1):
            overlap = min(end, (at + 1) * width) - max(start, at * width)
            self.bytes[link_class, at] += size * overlap / (end - start)


def summary_events(schedule: Schedule, topology: Topology, link_class: np.ndarray,
                   links: Sequence[int], member_class: np.ndarray,
                   computations: Sequence[tuple[int, float, float, Compute | Parallel]],
                   counters: LinkCounters, clock_hz: float) -> list[dict[str, Any]]:
    """A step's trace in bounded size: one track per class of accelerators (its
    representative's computations) and one counter per class of links (GB/s on one of its
    links, bin by bin); `links` are the link classes' representatives."""
    us = 1e6 / clock_hz
    members = np.bincount(member_class)
    alike = np.bincount(link_class, minlength=len(links))
    events: list[dict[str, Any]] = [
        {"name": "process_name", "ph": "M", "pid": _ACCELERATORS,
         "args": {"name": "accelerators (a track per class of alike accelerators)"}},
        {"name": "process_name", "ph": "M", "pid": _LINKS,
         "args": {"name": "links (GB/s on one link of each class)"}}]
    for representative in sorted({member for member, *_ in computations}):
        count = int(members[member_class[representative]])
        events.append({"name": "thread_name", "ph": "M", "pid": _ACCELERATORS,
                       "tid": representative,
                       "args": {"name": f"accelerator {representative}"
                                + (f" and {count - 1} alike" if count > 1 else "")}})
    events += _computation_events(schedule, computations, us)
    seconds = counters.width_cycles / clock_hz
    for index, link in enumerate(links):
        name = topology.links[link].name + (f" and {alike[index] - 1} alike"
                                             if alike[index] > 1 else "")
        used = np.flatnonzero(counters.bytes[index])
        for at in range(min(int(used[-1]) + 2, len(counters.bytes[index])) if len(used) else 0):
            events.append({"name": name, "ph": "C", "pid": _LINKS,
                           "ts": at * counters.width_cycles * us,
                           "args": {"GB/s": counters.bytes[index, at] / seconds / 1e9}})
    return events
