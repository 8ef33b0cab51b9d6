"""A simulated step as a Chrome / Perfetto trace (open it in ui.perfetto.dev).

One track per accelerator (its computations: "layer phase", with the busiest
PU count and MACs as arguments; computations that run side by side on a
cube are one event named by all of them) and one per directed link (every
message's span on it, from its first chunk's start to its last chunk's end,
with its bytes, step and route ends as arguments). Times are microseconds of
the array clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hypar_sim.hardware.topology import Topology
from hypar_sim.sim.schedule import Compute, Parallel, Schedule

_ACCELERATORS, _LINKS = 1, 2


def _name(schedule: Schedule, compute: Compute) -> str:
    return f"{schedule.units.names[compute.layer]} {compute.phase.value}"


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
    for member, start, end, task in computations:
        parts = task.computes if isinstance(task, Parallel) else (task,)
        events.append({
            "name": " + ".join(_name(schedule, c) for c in parts), "cat": "compute", "ph": "X",
            "pid": _ACCELERATORS, "tid": member, "ts": start * us, "dur": (end - start) * us,
            "args": {"cycles": end - start, "macs": sum(c.costs[member].macs for c in parts),
                     "pus": max(c.costs[member].pus_used for c in parts)}})
    for (_, link), (start, finish, size, message) in spans.items():
        events.append({
            "name": f"{schedule.units.names[message.layer]} {message.kind.value}",
            "cat": "link", "ph": "X", "pid": _LINKS, "tid": link, "ts": start * us,
            "dur": (finish - start) * us,
            "args": {"bytes": size, "src": message.src, "dst": message.dst,
                     "round": message.round}})
    return events
